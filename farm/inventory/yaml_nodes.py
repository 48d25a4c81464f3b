"""Safe YAML reading that keeps line numbers: plain data only, no tags, no aliases.

We compose the YAML node graph ourselves instead of constructing objects, so a
`!!python/object` tag or an anchor/alias bomb is an error, never an object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from farm.errors import ConfigError

_PLAIN_TAGS = {
    "tag:yaml.org,2002:str", "tag:yaml.org,2002:int", "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null", "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map",
}
MAX_INVENTORY_BYTES = 1 << 20


@dataclass(frozen=True)
class Located:
    """A plain YAML value with the 1-based line it came from."""

    value: Any  # str | int | float | bool | None | list[Located] | dict[str, Located]
    line: int


class _NoAliasLoader(yaml.SafeLoader):
    def compose_node(self, parent, index):  # type: ignore[no-untyped-def]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise ConfigError(
                "YAML aliases (*name) are not allowed in an inventory",
                file=self.name, line=event.start_mark.line + 1,
                hint="write the values out in full",
            )
        event = self.peek_event()
        anchor = getattr(event, "anchor", None)
        if anchor:
            raise ConfigError(
                f"YAML anchors (&{anchor}) are not allowed in an inventory",
                file=self.name, line=event.start_mark.line + 1,
                hint="write the values out in full; use `defaults:` for shared fields",
            )
        return super().compose_node(parent, index)


def read_yaml(text: str, file: str) -> Located | None:
    """Parse `text` into Located plain values; ConfigError on syntax or unsafe content."""
    if len(text.encode()) > MAX_INVENTORY_BYTES:
        raise ConfigError(f"file is larger than {MAX_INVENTORY_BYTES} bytes", file=file,
                          hint="an inventory is a short list of devices")
    loader = None
    try:
        loader = _NoAliasLoader(text)  # the reader already rejects control characters
        loader.name = file
        node = loader.get_single_node()
        return None if node is None else _convert(node, file, loader)
    except RecursionError:
        raise ConfigError("YAML nested too deeply", file=file,
                          hint="an inventory is a flat list of devices") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise ConfigError(f"not valid YAML: {exc.problem or exc}", file=file,
                          line=mark.line + 1 if mark else None,
                          hint="fix the syntax at that line") from None
    except yaml.YAMLError as exc:  # e.g. ReaderError: a control character in the file
        raise ConfigError(f"not valid YAML: {exc}", file=file,
                          hint="remove the non-printable character") from None
    finally:
        if loader is not None:
            loader.dispose()


def _convert(node: yaml.Node, file: str, loader: yaml.SafeLoader) -> Located:
    line = node.start_mark.line + 1
    if node.tag not in _PLAIN_TAGS:
        raise ConfigError(f"YAML tag {node.tag!r} is not allowed", file=file, line=line,
                          hint="an inventory holds plain strings, numbers, lists and mappings")
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Located] = {}
        for key_node, value_node in node.value:
            key = _convert(key_node, file, loader)
            if not isinstance(key.value, str):
                raise ConfigError(f"mapping key {key.value!r} is not a string", file=file,
                                  line=key.line)
            if key.value in out:
                raise ConfigError(f"key {key.value!r} appears twice in one mapping", file=file,
                                  line=key.line, hint="keep one of them")
            out[key.value] = _convert(value_node, file, loader)
        return Located(out, line)
    if isinstance(node, yaml.SequenceNode):
        return Located([_convert(item, file, loader) for item in node.value], line)
    return Located(loader.construct_object(node, deep=True), line)
