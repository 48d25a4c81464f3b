#!/usr/bin/env bash
# Set up everything the tests need (Debian + Python packages, the aarch64 sysroot), run
# ruff and the whole test suite (it brings up and tears down its own lab), and make sure
# nothing is left running afterwards. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# the aarch64 sysroot is cached outside the clone (and outside /root, which lab devices
# replace with a private home), so fresh clones on one machine build it once
export FARM_SYSROOT=${FARM_SYSROOT:-/var/cache/farm/sysroot-aarch64}
scripts/setup.sh --lab
# labs left by a killed test run (the suite's own lab is torn down by its fixture)
# and PostgreSQL servers of the tests (tests/pg_fixture.py) whose pytest is gone
cleanup() {
  .venv/bin/farm lab down --stale >/dev/null 2>&1 || true
  for owner in /tmp/farm-pg-*/owner.pid; do
    [ -f "$owner" ] || continue
    kill -0 "$(cat "$owner")" 2>/dev/null && continue  # its pytest still runs
    dir=$(dirname "$owner")
    for ctl in /usr/lib/postgresql/*/bin/pg_ctl; do
      runuser -u postgres -- "$ctl" -D "$dir/pg/data" -m immediate stop >/dev/null 2>&1 || true
    done
    rm -rf "$dir"
  done
}
trap cleanup EXIT
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
