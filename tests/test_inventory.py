"""Inventory loading and validation: every error names file, line, device, key and the fix."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from farm.errors import ConfigError
from farm.inventory import load_inventory, parse_inventory
from farm.inventory.builtin import cpu_features

REPO = Path(__file__).resolve().parent.parent

GOOD = """\
version: 1
devices:
  - name: phone1
    transport: ssh
    host: 10.0.0.5
    port: 8022
    arch: aarch64
    features: [neon, dotprod]
    cores: 8
    workdir: /data/local/tmp/farm
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "devices.yaml"
    path.write_text(text)
    return path


def test_example_inventory_loads_with_pixel7_and_rpi5():
    inv = load_inventory(str(REPO / "devices.example.yaml"))
    assert {"local", "pixel7", "rpi5"} <= set(inv.devices)
    pixel = inv.get("pixel7")
    assert (pixel.port, pixel.arch, pixel.features) == (8022, "aarch64", ("neon", "dotprod"))
    assert pixel.known_hosts and pixel.known_hosts.endswith(".farm/known_hosts")
    assert inv.get("pixel7-rpc").transport == "tvm-rpc"


def test_good_inventory_and_source_line(tmp_path):
    path = write(tmp_path, GOOD)
    [device] = parse_inventory(GOOD, str(path))
    assert device.name == "phone1" and device.triple == "aarch64-linux-gnu"
    assert device.source == f"{path}:3"


def test_lookup_order_flag_then_env_then_cwd(tmp_path, monkeypatch):
    flag = write(tmp_path, GOOD)
    other = tmp_path / "other.yaml"
    other.write_text(GOOD.replace("phone1", "phone2"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FARM_INVENTORY", raising=False)
    assert "phone1" in load_inventory(None).devices  # ./devices.yaml
    monkeypatch.setenv("FARM_INVENTORY", str(other))
    assert "phone2" in load_inventory(None).devices  # $FARM_INVENTORY beats ./devices.yaml
    assert "phone1" in load_inventory(str(flag)).devices  # --inventory beats both


def test_builtin_local_always_exists(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FARM_INVENTORY", raising=False)
    inv = load_inventory(None)
    assert list(inv.devices) == ["local"] and inv.source is None
    assert inv.get("local").arch == os.uname().machine


@pytest.mark.parametrize(
    ("name", "text", "line", "device", "key", "words"),
    [
        ("unknown key", GOOD.replace("    cores: 8\n", "    corez: 8\n"), 9, "phone1", "corez",
         "did you mean 'cores'"),
        ("wrong type", GOOD.replace("cores: 8", "cores: eight"), 9, "phone1", "cores",
         "expected an integer"),
        ("bad port", GOOD.replace("8022", "70000"), 6, "phone1", "port", "out of range"),
        ("missing field", GOOD.replace("    arch: aarch64\n", ""), 3, "phone1", "arch",
         "missing required key"),
        ("shell metachar name", GOOD.replace("name: phone1", "name: 'p;rm -rf ~'"), 3,
         "p;rm -rf ~",
         "name", "shell metacharacters"),
        ("shell metachar path", GOOD.replace("/data/local/tmp/farm", "'/tmp/$(reboot)'"), 10,
         "phone1", "workdir", "shell metacharacters"),
        ("path traversal", GOOD.replace("/data/local/tmp/farm", "/data/../../etc"), 10,
         "phone1", "workdir", "'..'"),
        ("relative workdir", GOOD.replace("/data/local/tmp/farm", "farm"), 10, "phone1",
         "workdir", "must be absolute"),
        ("unknown feature", GOOD.replace("dotprod", "warp9"), 8, "phone1", "features",
         "unknown feature"),
        ("bad transport", GOOD.replace("transport: ssh", "transport: telnet"), 4, "phone1",
         "transport", "not one of"),
        ("ssh without host", GOOD.replace("    host: 10.0.0.5\n", ""), 3, "phone1", "host",
         "needs `host`"),
        ("huge value", GOOD.replace("10.0.0.5", "a" * 300), 5, "phone1", "host",
         "characters long"),
        ("reserved name", GOOD.replace("phone1", "local"), 3, "local", "name", "reserved"),
        ("triple mismatch", GOOD.replace("    cores: 8\n", "    triple: x86_64-linux-gnu\n"),
         9, "phone1", "triple", "does not match arch"),
        ("bool as int", GOOD.replace("cores: 8", "cores: true"), 9, "phone1", "cores",
         "expected an integer"),
    ],
)
def test_validation_errors(tmp_path, name, text, line, device, key, words):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_inventory(str(path))
    err = info.value
    assert (err.file, err.line, err.device, err.key) == (str(path), line, device, key), name
    assert words in str(err)
    assert "hint:" in str(err)  # every error says what to do


def test_duplicate_name_points_at_both(tmp_path):
    text = GOOD + GOOD.split("devices:\n", 1)[1]
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_inventory(str(path))
    assert info.value.key == "name" and info.value.line == 11
    assert "first defined at line 3" in str(info.value)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("devices:\n  - !!python/object/apply:os.system ['touch /tmp/pwned']\n",
         "tag 'tag:yaml.org,2002:python/object/apply:os.system' is not allowed"),
        ("defaults: &d {cores: 2}\ndevices: []\n", "anchors"),
        ("a: &x [1]\nb: *x\n", "anchors"),
        ("devices: [\n", "not valid YAML"),
        ("- just\n- a list\n", "top level must be a mapping"),
        ("devices: {name: x}\n", "must be a list"),
        ("version: 2\ndevices: []\n", "version 2 is not supported"),
        ("devices:\n  - name: a\n    name: b\n", "appears twice"),
    ],
)
def test_unsafe_or_malformed_yaml(tmp_path, text, words):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_inventory(str(path))
    assert words in str(info.value)
    assert not Path("/tmp/pwned").exists()


def test_missing_inventory_file_is_clear(tmp_path):
    with pytest.raises(ConfigError, match="inventory file not found"):
        load_inventory(str(tmp_path / "nope.yaml"))


def test_unknown_device_suggests(tmp_path):
    inv = load_inventory(str(write(tmp_path, GOOD)))
    with pytest.raises(ConfigError, match="did you mean 'phone1'"):
        inv.get("phone")


def test_cpu_features_from_cpuinfo():
    x86 = "processor: 0\nflags\t\t: fpu sse4_2 avx2 fma avx512f\n"
    assert cpu_features(x86, "x86_64") == ("avx2", "avx512f", "fma", "sse4.2")
    arm = "Features\t: fp asimd evtstrm asimddp\n"
    assert cpu_features(arm, "aarch64") == ("dotprod", "neon")
    # Linux's spellings of the VNNI flags (a Sapphire Rapids /proc/cpuinfo line)
    spr = "flags\t\t: avx512f avx512bw avx512_vnni avx_vnni amx_int8 avx512_bf16\n"
    assert cpu_features(spr, "x86_64") == ("amx-int8", "avx512bw", "avx512f", "avx512vnni",
                                           "avxvnni")


def test_the_agent_reads_cpuinfo_flags_as_the_host_does(monkeypatch):
    """The agent (on the device, no farm package) keeps its own copy of the flag names: it
    must map every /proc/cpuinfo flag to the same feature as the host's builtin inventory,
    or `devices check` calls a feature the inventory lists missing (as avx512_vnni did)."""
    import importlib.util
    from pathlib import Path

    from farm.inventory import builtin

    path = Path(__file__).resolve().parent.parent / "agents" / "farm_agent.py"
    monkeypatch.syspath_prepend(str(path.parent))  # its own modules (agents/agent_*.py)
    spec = importlib.util.spec_from_file_location("farm_agent_flags", path)
    assert spec and spec.loader
    agent = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agent)
    assert {flag: name for name, flag in agent.X86_FLAGS.items()} == builtin._X86_FLAGS
    assert {flag: name for name, flag in agent.ARM_FLAGS.items()} == builtin._ARM_FLAGS


def test_every_mistake_is_reported_at_once(tmp_path, capsys):
    """Three mistakes in three places took three runs to see; one run names them all, each
    with its line, device, key and fix (and the CLI exits 1 once)."""
    from farm.cli.main import main

    second = GOOD.split("devices:\n", 1)[1].replace("phone1", "phone2")
    third = second.replace("phone2", "phone3")
    text = (GOOD.replace("    cores: 8\n", "    corez: 8\n")           # phone1: unknown key
            + second.replace("8022", "70000")                         # phone2: port range
            + third.replace("    arch: aarch64\n", ""))               # phone3: no arch
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_inventory(str(path))
    err = info.value
    problems = err.problems  # type: ignore[attr-defined]
    assert [(p.line, p.device, p.key) for p in problems] == [
        (9, "phone1", "corez"), (14, "phone2", "port"), (19, "phone3", "arch")]
    assert (err.line, err.device, err.key) == (9, "phone1", "corez")  # the first
    assert "3 problems" in str(err) and "did you mean 'cores'" in str(err)
    assert "out of range" in str(err) and "missing required key" in str(err)
    assert main(["--inventory", str(path), "devices"]) == 1
    stderr = capsys.readouterr().err
    assert all(f"{path}:{line}" in stderr for line in (9, 14, 19))


def test_the_repository_example_is_not_a_fleet(tmp_path, monkeypatch, capsys):
    """At the repository root `farm devices` listed the example `pixel7` as if it were
    real: the example is devices.example.yaml, which farm never reads by itself."""
    from farm.cli.main import main

    (tmp_path / "devices.example.yaml").write_text((REPO / "devices.example.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FARM_INVENTORY", raising=False)
    assert set(load_inventory(None).devices) == {"local"}
    assert not (REPO / "devices.yaml").exists()
    assert main(["devices", "--output", "json"]) == 0
    assert [d["name"] for d in json.loads(capsys.readouterr().out)] == ["local"]
    assert main(["devices"]) == 0
    assert "devices.example.yaml documents every key" in capsys.readouterr().err
