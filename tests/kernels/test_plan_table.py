"""The plan format is written twice, in C (kernels/runtime/plan.h, plan.c, include/fk.h)
and in Python (farm/routes/custom/plan_format.py); this test holds them to one table: every
op kind, name and enum value, the CPU feature bits, and the record sizes as the C compiler
lays them out."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from farm.routes.custom import plan_format as pf

KERNELS = Path(__file__).resolve().parents[2] / "kernels"
PLAN_H = (KERNELS / "runtime" / "plan.h").read_text()


def c_constants(text: str, prefix: str) -> dict[str, int]:
    """NAME -> value of `PREFIX_NAME = 1,` enum members and `#define PREFIX_NAME (1ull << k)`."""
    found = {m[1]: int(m[2]) for m in re.finditer(rf"\b{prefix}_(\w+)\s*=\s*(-?\d+)", text)}
    found.update({m[1]: 1 << int(m[2]) for m in re.finditer(
        rf"#define {prefix}_(\w+)\s+\(1ull << (\d+)\)", text)})
    return found


def test_op_kinds_and_names_agree() -> None:
    kinds = c_constants(PLAN_H, "FK_OP")
    assert kinds.pop("MAX") == max(kinds.values())
    python = {name.removeprefix("OP_"): getattr(pf, name) for name in dir(pf)
              if name.startswith("OP_") and isinstance(getattr(pf, name), int)
              and name not in ("OP_NAME_LEN",)}
    assert kinds == python
    c_names = re.search(r'names\[\] = \{"\?", (.*?)\};',
                        (KERNELS / "runtime" / "plan.c").read_text())
    assert c_names, "fk_op_kind_name's table not found in plan.c"
    listed = [n.strip().strip('"') for n in c_names[1].split(",")]
    assert listed == [pf.OP_NAMES[k] for k in sorted(pf.OP_NAMES)]


def _python_enum(prefix: str) -> dict[str, int]:
    """plan_format's constants named PREFIX_*, keyed as the C enum names them."""
    return {name.removeprefix(prefix): getattr(pf, name) for name in dir(pf)
            if name.startswith(prefix) and isinstance(getattr(pf, name), int)}


@pytest.mark.parametrize(("prefix", "python_prefix"), [
    ("FK_W", "W_"), ("FK_ACT", "ACT_"), ("FK_ROLE", "ROLE_"), ("FK_BUF", "BUF_"),
    ("FK_GELU", "GELU_"),
])
def test_enums_agree(prefix: str, python_prefix: str) -> None:
    python = _python_enum(python_prefix)
    assert python, f"no {python_prefix}* constants in plan_format.py"
    assert c_constants(PLAN_H, prefix) == python


def test_dtypes_header_and_feature_bits_agree() -> None:
    c_dtypes = c_constants(PLAN_H, "FK_DT")
    assert sorted(c_dtypes.values()) == sorted(pf.DTYPES.values())
    assert re.search(r"#define FK_SRC_POSITION \((-?\d+)\)", PLAN_H)[1] == str(pf.SRC_POSITION)
    for name, value in (("FK_PLAN_VERSION", pf.VERSION), ("FK_PLAN_HEADER", pf.HEADER_SIZE),
                        ("FK_NAME", pf.NAME_LEN)):
        assert re.search(rf"#define {name} (\d+)", PLAN_H)[1] == str(value), name
    assert "char name[64];" in PLAN_H and pf.OP_NAME_LEN == 64
    bits = c_constants((KERNELS / "include" / "fk.h").read_text(), "FK_FEAT")
    assert {k.lower(): v.bit_length() - 1 for k, v in bits.items()} == pf.FEATURES


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_record_sizes_as_the_compiler_lays_them_out(tmp_path: Path) -> None:
    source = tmp_path / "sizes.c"
    source.write_text('#include <stdio.h>\n#include "plan.h"\nint main(void) {\n'
                      '  printf("%zu %zu %zu %zu %zu\\n", sizeof(fk_plan_input), '
                      'sizeof(fk_plan_output), sizeof(fk_plan_buf), sizeof(fk_plan_tensor), '
                      'sizeof(fk_op));\n  return 0;\n}\n')
    exe = tmp_path / "sizes"
    subprocess.run(["cc", "-I", str(KERNELS / "runtime"), str(source), "-o", str(exe)],
                   check=True, capture_output=True)
    sizes = [int(n) for n in subprocess.run([str(exe)], check=True, capture_output=True,
                                            text=True).stdout.split()]
    assert sizes == [pf._INPUT.size, pf._OUTPUT.size, pf._BUF.size, pf._TENSOR.size,
                     pf._OP.size]
