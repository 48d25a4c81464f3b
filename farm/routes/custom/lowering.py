"""What an op handler (lower_ops.py, lower_mobilebert.py, lower_pooler.py, lower_roberta.py)
may use of the Lowerer (lower.py): a Protocol, so the handlers name no module that imports
them (lower.py makes them its methods) and the lowerer's modules form no import cycle."""

from __future__ import annotations

from typing import Protocol

from farm.errors import BuildError
from farm.routes.custom.ir import Ir
from farm.routes.custom.values import Lin


class LowererApi(Protocol):
    ir: Ir
    quant: int | None
    gelu_act: int

    def fail(self, why: str, hint: str | None = None) -> BuildError: ...

    def get(self, name: str) -> object: ...

    def emit(self, kind: int, name: str, ins: list[int], cols: int, **kw: object) -> int: ...

    def act(self, v: object) -> int: ...

    def fc(self, x: object, w: object) -> Lin: ...

    def value_shape(self, name: str) -> tuple[int, ...] | None: ...
