"""Property tests of the inventory loader (`farm.inventory.parse_inventory`).

Properties: a valid device written as YAML loads back field for field; any value that
reaches a remote command line or path (name, host, user, python, workdir, key, tags) is
either refused or needs no shell quoting at all; an accepted work dir is absolute and
has no `..`; a value of the wrong YAML type for any key is a ConfigError naming that key,
its device and its line; and no text whatsoever makes the loader raise anything but
ConfigError.
"""

from __future__ import annotations

import shlex
import string
from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from farm.errors import ConfigError
from farm.inventory import parse_inventory
from farm.inventory.loader import KNOWN_FEATURES

SETTINGS = settings(max_examples=100, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
FILE = "/inv/devices.yaml"

name_chars = string.ascii_letters + string.digits + "._-"
names = st.builds(lambda a, b: a + b, st.sampled_from(string.ascii_letters + string.digits),
                  st.text(name_chars, max_size=20)).filter(lambda n: n != "local")
path_tail = st.lists(st.text(string.ascii_letters + string.digits + "_+-~", min_size=1,
                             max_size=8), min_size=1, max_size=4)
workdirs = path_tail.map(lambda parts: "/" + "/".join(parts))
hosts = st.builds(lambda a, b: a + b, st.sampled_from(string.ascii_lowercase),
                  st.text(string.ascii_lowercase + string.digits + ".-", max_size=30))

DEVICES = st.fixed_dictionaries(
    {"name": names, "transport": st.just("ssh"), "host": hosts,
     "arch": st.sampled_from(["x86_64", "aarch64"])},
    optional={"port": st.integers(1, 65535), "cores": st.integers(1, 1024),
              "user": st.sampled_from(["root", "u0_a123", "shell", "pi"]),
              "workdir": workdirs, "python": st.sampled_from(["python3", "/usr/bin/python3"]),
              "features": st.lists(st.sampled_from(sorted(KNOWN_FEATURES)), max_size=3,
                                   unique=True),
              "tags": st.lists(names, max_size=3),
              "description": st.text(max_size=50)})

# keys whose values reach a command line or a path on the device
COMMAND_KEYS = ("name", "host", "user", "python", "workdir", "tags")


def dump(devices: list[dict[str, Any]]) -> str:
    return yaml.safe_dump({"version": 1, "devices": devices}, sort_keys=False)


@SETTINGS
@given(st.lists(DEVICES, min_size=1, max_size=4, unique_by=lambda d: d["name"]))
def test_valid_devices_load_back_field_for_field(devices: list[dict[str, Any]]) -> None:
    loaded = parse_inventory(dump(devices), FILE)
    assert [d.name for d in loaded] == [d["name"] for d in devices]
    for raw, dev in zip(devices, loaded, strict=True):
        for key, value in raw.items():
            got = getattr(dev, key)
            assert (list(got) if isinstance(got, tuple) else got) == value, key
        assert dev.source.startswith(f"{FILE}:")


@SETTINGS
@given(DEVICES, st.sampled_from(COMMAND_KEYS), st.text(max_size=40))
def test_command_values_are_refused_or_need_no_quoting(device: dict[str, Any], key: str,
                                                       value: str) -> None:
    device = {**device, key: [value] if key == "tags" else value}
    try:
        [dev] = parse_inventory(dump([device]), FILE)
    except ConfigError as exc:
        assert exc.file == FILE and exc.line is not None
        return
    got = getattr(dev, key)
    for item in (got if isinstance(got, tuple) else (got,)):
        assert shlex.quote(item) == item, f"{key}={item!r} would need shell quoting"
        assert not item.startswith("-") or key in ("workdir", "python")
    if key == "workdir":
        assert dev.workdir.startswith("/") and ".." not in PurePosixPath(dev.workdir).parts


WRONG_VALUES = st.one_of(st.booleans(), st.integers(), st.floats(allow_nan=False),
                         st.lists(st.integers(), min_size=1, max_size=2),
                         st.dictionaries(st.just("k"), st.integers(), min_size=1))


@SETTINGS
@given(DEVICES, st.sampled_from(["name", "transport", "arch", "host", "port", "user",
                                 "workdir", "python", "cores", "features", "tags",
                                 "identity_file", "known_hosts", "key", "description"]),
       WRONG_VALUES)
def test_wrong_yaml_type_names_the_key(device: dict[str, Any], key: str, value: Any) -> None:
    ints = ("port", "cores")
    lists = ("features", "tags")
    if key in ints and isinstance(value, int) and not isinstance(value, bool):
        value = [value]  # an int is the right type here; a list is not
    if key in lists and isinstance(value, list):
        value = {"k": 1}
    if key not in ints and isinstance(value, int) and not isinstance(value, bool) and \
            key not in lists:
        value = [value]  # plain ints are accepted as strings (e.g. `name: 42`)
    device = {**device, key: value}
    with pytest.raises(ConfigError) as info:
        parse_inventory(dump([device]), FILE)
    err = info.value
    assert err.key == key and err.file == FILE and err.line is not None, str(err)
    if key != "name":
        assert err.device == device["name"]
    assert "hint:" in str(err)


# YAML refuses C0/C1 control characters in its reader; that case has its own test below
printable = st.text(st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="\ufeff")
                    | st.sampled_from("\n\t"), max_size=400)


@SETTINGS
@given(printable)
def test_any_text_loads_or_raises_config_error(text: str) -> None:
    try:
        parse_inventory(text, FILE)
    except ConfigError as exc:
        assert str(exc).startswith(FILE)


@pytest.mark.parametrize("text", ["\x1f", "devices:\n  - name: a\x00b\n"])
def test_control_characters_are_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        parse_inventory(text, FILE)


YAMLISH = st.lists(st.sampled_from(
    ["devices:", "- ", "  ", "name: a", "transport: ssh", "host: h", "arch: x86_64", "&a ",
     "*a", "!!python/object:os.system ", "!!binary ", "[", "]", "{", "}", ":", "'", '"', "\n",
     "version: 1", "defaults:", "<<: ", "? ", "%YAML 1.1\n", "---\n", "0x1F", "1e400"]),
    max_size=30).map("".join)


@SETTINGS
@given(YAMLISH)
def test_yaml_fragments_load_or_raise_config_error(text: str) -> None:
    try:
        parse_inventory(text, FILE)
    except ConfigError as exc:
        assert str(exc).startswith(FILE)


@pytest.mark.parametrize("text", ["a: " + "[" * 5000, "devices:\n  - " + "[" * 3000 + "]" * 3000])
def test_deeply_nested_yaml_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_inventory(text, FILE)
