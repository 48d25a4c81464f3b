#!/usr/bin/env bash
# Set up farm and run the main job on the embedded default device (`local`): build the
# tiny encoder for all three routes (ONNX Runtime, TVM, custom executor), deploy, and bench
# them interleaved in the live view (about half a minute after setup).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/farm devices check local
.venv/bin/farm deploy --device local
exec .venv/bin/farm bench --device local --model tiny --routes ort,tvm,custom "$@"
