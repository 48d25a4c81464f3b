"""TVM route runner entry point: hands the request to the runtime-only C++ runner.

Started by the agent as ``python tvm_runner.py --request FILE.json`` like every route
(contract: docs/ARCHITECTURE.md). It replaces itself (``os.execv``) with
``runners/tvm-<arch>/tvm_runner``, a small C++ program linking only libtvm_runtime and
libtvm_ffi (built by farm.routes.tvm.runner_build, deployed as a directory with both
libraries), so the process the agent measures is the TVM runtime and nothing else: exec
starts a fresh address space, so VmHWM is the runner's own, not Python's.

Stdlib only, Python 3.8+. When the binary is missing it prints one error event and exits 1.
"""

import json
import os
import platform
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def binary_path():
    machine = platform.machine()
    arch = "aarch64" if machine in ("arm64", "aarch64") else machine
    return os.path.join(HERE, "tvm-%s" % arch, "tvm_runner")


def main(argv):
    binary = binary_path()
    if not os.access(binary, os.X_OK):
        print(json.dumps({"ev": "error", "message": "tvm runner binary %s is not deployed "
                          "(build it with farm.routes.tvm.runner_build and deploy its "
                          "directory)" % binary}), flush=True)
        return 1
    sys.stdout.flush()
    os.execv(binary, [binary] + list(argv))
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
