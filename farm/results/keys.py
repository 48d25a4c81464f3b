"""The keys records are paired by across runs (`farm compare`, the gate, the noise floor).

`config_key(rec, fields)`: the record's values of `fields` but the last, then the label of
its configuration flags (`farm.results.config_flags`), so fusion on and off never pool.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from farm.results.config_flags import config_flags, config_label

KEY_FIELDS = ("device", "route", "variant", "threads", "config")


def config_key(rec: dict[str, Any], fields: Sequence[str] = KEY_FIELDS) -> tuple[Any, ...]:
    """(the record's values of `fields` but the last, its configuration label): the key
    two runs' records are paired by (`farm compare`; the gate adds the model)."""
    config = config_label(config_flags(rec.get("build_flags")))
    return (*(rec.get(k) for k in fields[:-1]), config)


def sort_key(key: tuple[Any, ...]) -> tuple[str, ...]:
    return tuple("" if v is None else f"{v:08d}" if isinstance(v, int) else str(v)
                 for v in key)


def group_by(records: Sequence[dict[str, Any]],
             key: Callable[[dict[str, Any]], tuple[Any, ...]] = config_key,
             ) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for rec in records:
        out.setdefault(key(rec), []).append(rec)
    return out
