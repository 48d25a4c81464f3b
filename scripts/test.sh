#!/usr/bin/env bash
# Set up everything the tests need (Debian + Python packages, the aarch64 sysroot), run
# ruff and the whole test suite (it brings up and tears down its own lab), and make sure
# nothing is left running afterwards. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --lab
cleanup() { .venv/bin/farm lab down >/dev/null 2>&1 || true; .venv/bin/farm tracker stop >/dev/null 2>&1 || true; }
trap cleanup EXIT
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
