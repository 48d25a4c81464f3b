"""Shared fixtures: the real lab (session scoped) lives in tests/lab_fixture.py."""

from __future__ import annotations

from lab_fixture import lab  # noqa: F401  (re-exported pytest fixture)
