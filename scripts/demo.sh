#!/usr/bin/env bash
# Set up farm and run the main job on the embedded default device (`local`): build the
# tiny encoder, deploy the agent, and bench it with ONNX Runtime in the live view.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/farm devices check local
.venv/bin/farm deploy --device local
exec .venv/bin/farm bench --device local --model tiny --routes ort "$@"
