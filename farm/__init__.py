"""farm: measure TVM, ONNX Runtime and a custom executor on real devices."""

from __future__ import annotations

__version__ = "0.1.0"
