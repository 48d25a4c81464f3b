"""What each op category holds, per configuration, read from the profiled nodes.

The seed article's per-op rows are Attention / FC / LayerNorm / GELU, written for BERT. A
model whose normalisation is NoNorm (MobileBERT: an elementwise x * g + b) or whose
activation is ReLU has no LayerNorm or GELU op: its NoNorm time is charged to `layernorm`
and its ReLU to `gelu` (farm/categories.py), and this table says which op types each
category held for the model measured, so a reader never compares a ReLU with a GELU unawares.

- `category_ops(config) -> {category: [op type, ...]}` from the first record's `ops.nodes`;
- `fused_away(config, cats)`: the category ms with None ("—") for a named category in which
  no node ran as its own step (e.g. ReLU fused into the GEMM epilogue: its time is in fc),
  instead of a 0 that reads like "free";
- `categories_table(configs)`: one row per profiled configuration.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from farm.report.configs import CATEGORIES, NAMED_CATEGORIES, Config
from farm.report.tables import Column, ReportTable

FUSED_NOTE = ("no op of its own: fused into another op (a ReLU/GELU in the GEMM epilogue, a "
              "NoNorm folded into GEMM weights, a NoNorm after a residual in the FC epilogue; "
              "its time is in that op's category), or run as generic kernels charged to other "
              "(TVM unfused: NoNorm's multiply/add)")


def _nodes(c: Config) -> list[Mapping[str, Any]]:
    for r in c.records:
        ops = r.get("ops")
        if isinstance(ops, Mapping) and isinstance(ops.get("nodes"), list) and ops["nodes"]:
            return [n for n in ops["nodes"] if isinstance(n, Mapping)]
    return []


def category_ops(c: Config) -> dict[str, list[str]]:
    """Op types per category, most time first (TVM kernels by their fused name)."""
    per: dict[str, Counter[str]] = {cat: Counter() for cat in CATEGORIES}
    for n in _nodes(c):
        cat = str(n.get("category") or "other")
        op = str(n.get("op") or n.get("name") or "?")
        per.setdefault(cat, Counter())[op] += float(n.get("ms") or 0.0)
    return {cat: [op for op, _ in cnt.most_common()] for cat, cnt in per.items()}


def fused_away(c: Config, cats: dict[str, float]) -> dict[str, float | None]:
    """`cats` with None for a named category that had no node of its own (see module doc)."""
    held = category_ops(c)
    if not any(held.values()):  # no node list stored: keep the figures as they are
        return dict(cats)
    return {k: (None if k in NAMED_CATEGORIES and not held.get(k) and not v else v)
            for k, v in cats.items()}


def _short(ops: list[str], limit: int = 4) -> str | None:
    if not ops:
        return None
    more = f" +{len(ops) - limit}" if len(ops) > limit else ""
    return ", ".join(ops[:limit]) + more


def categories_table(configs: Sequence[Config]) -> ReportTable:
    cols = [Column("device", "device"), Column("route", "route"), Column("config", "config"),
            Column("variant", "variant")]
    cols += [Column(cat, f"{cat} holds") for cat in CATEGORIES]
    cols.append(Column("note", "note"))
    rows = []
    for c in configs:
        held = category_ops(c)
        if not any(held.values()):
            continue
        empty = [k for k in NAMED_CATEGORIES if not held.get(k)]
        row: dict[str, Any] = {"device": c.device, "route": c.route, "config": c.label,
                               "variant": c.variant}
        row.update({cat: _short(held.get(cat, [])) for cat in CATEGORIES})
        row["note"] = f"{', '.join(empty)} — {FUSED_NOTE}" if empty else None
        rows.append(row)
    return ReportTable(
        "categories", "What each op category holds",
        "op types profiled in each category for the model measured, most time first. NoNorm "
        "(MobileBERT) is charged to layernorm and ReLU to gelu; — = no op of that category "
        "ran as its own step.", cols, rows)
