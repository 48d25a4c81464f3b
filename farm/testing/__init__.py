"""Support for the `farm` pytest plugin (`farm.pytest_plugin`): a test session's devices,
leases and benches (`session`) and what a test asserts on (`result`)."""

from farm.testing.result import FarmResult, GateCheck
from farm.testing.session import FarmSession

__all__ = ["FarmResult", "FarmSession", "GateCheck"]
