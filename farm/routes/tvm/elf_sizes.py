"""Section sizes of an ELF shared library, read from its section headers.

Used to split a TVM library into its code and the constants Relax binds into it: those
go to `.rodata` (the `__tvm_ffi__library_bin` blob), in whatever form TVM chose to keep
them (a 4-bit MatMulNBits file's weights come out dequantised to fp32), so the ONNX
file's initializer bytes are not a measure of them. Plain `struct` parsing: the library
may be for another arch than this host, and only the header tables are read.
"""

from __future__ import annotations

import struct
from pathlib import Path

from farm.errors import BuildError

_SHF_WRITE = 0x1
_SHF_ALLOC = 0x2
_SHF_EXECINSTR = 0x4


def section_sizes(path: Path) -> dict[str, tuple[int, int]]:
    """{section name: (size in bytes, flags)} of a 64- or 32-bit ELF file."""
    try:
        return _read_sections(path)
    except (struct.error, ValueError):
        raise BuildError(f"{path}: truncated ELF section table",
                         hint="rebuild it (`farm build --route tvm ...`)") from None


def _read_sections(path: Path) -> dict[str, tuple[int, int]]:
    with open(path, "rb") as f:
        ident = f.read(16)
        if ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) or ident[5] not in (1, 2):
            raise BuildError(f"{path} is not an ELF file",
                             hint="rebuild it (`farm build --route tvm ...`)")
        wide, end = ident[4] == 2, "<" if ident[5] == 1 else ">"
        header = f.read(48 if wide else 36)
        if wide:
            shoff, = struct.unpack_from(end + "Q", header, 24)
            shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", header, 42)
        else:
            shoff, = struct.unpack_from(end + "I", header, 16)
            shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", header, 30)
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        if len(table) != shentsize * shnum or shstrndx >= shnum:
            raise ValueError("short section table")
        fmt = end + ("IIQQQQ" if wide else "IIIIII")
        rows = [struct.unpack_from(fmt, table, i * shentsize) for i in range(shnum)]
        names_at, names_size = rows[shstrndx][4], rows[shstrndx][5]
        f.seek(names_at)
        names = f.read(names_size)
    sizes: dict[str, tuple[int, int]] = {}
    for name_at, _type, flags, _addr, _offset, size in rows[1:]:
        name = names[name_at:names.index(b"\0", name_at)].decode(errors="replace")
        sizes[name] = (size, flags)
    return sizes


def code_and_constants(path: Path) -> tuple[int, int]:
    """(bytes of everything but read-only data, bytes of read-only data) of a library.

    Read-only data is `.rodata` and its kin (allocated, not executable, not writable): for
    a Relax library, the bound constants, plus a few KiB of strings. The rest (code, its
    unwind tables and debug info, symbols) counts as code, so the two parts add up to the
    file a device stores.
    """
    total = Path(path).stat().st_size
    constants = sum(size for name, (size, flags) in section_sizes(path).items()
                    if name.startswith(".rodata") and flags & _SHF_ALLOC
                    and not flags & (_SHF_EXECINSTR | _SHF_WRITE))
    return total - constants, constants
