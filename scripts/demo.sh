#!/usr/bin/env bash
# Set up farm and run the main job on the embedded default device (`local`): build the
# tiny encoder for all three routes (ONNX Runtime, TVM, custom executor), deploy, and bench
# them interleaved in the live view (about half a minute after setup). In a log
# (`scripts/demo.sh > log`) the bench prints one line per step, then the table, then the
# one next command: the triangle report of this run and its HTML page.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/farm devices check local
.venv/bin/farm deploy --device local
status=0
.venv/bin/farm bench --device local --model tiny --routes ort,tvm,custom "$@" || status=$?
if [ "$status" -eq 0 ] || [ "$status" -eq 3 ]; then  # 3: some route failed, the rest is kept
  echo "next: .venv/bin/farm report latest --html triangle.html   # the triangle report" \
       "of this run, and the same as one HTML page"
fi
exit "$status"
