"""Keep what libraries print off our stdout, at the file-descriptor level.

TVM's ONNX importer (C++ and Python) prints IR to fd 1; `farm ... --output json` must stay
pure JSON. `quiet_stdout()` points fd 1 at a temp file for the block (C code writing to fd 1
included) and returns what was printed via `captured.text`; Python's sys.stdout is flushed
on both sides so nothing buffered leaks across the switch.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

_LOCK = threading.RLock()  # fd 1 is process-wide: one redirection at a time (nests)


@dataclass
class Captured:
    text: str = ""


@contextmanager
def quiet_stdout() -> Iterator[Captured]:
    captured = Captured()
    with _LOCK, tempfile.TemporaryFile(mode="w+b") as sink:
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(sink.fileno(), 1)
        try:
            yield captured
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
            sink.seek(0)
            captured.text = sink.read().decode(errors="replace")
