"""A deliberately hostile farm agent, for the lab test of "nothing trusted".

Started in place of the real agent (by a `python` wrapper named in the test's inventory) as
`hostile_agent.py MODE -u <real agent path> --workdir W ...`. It speaks protocol 1 well
enough to be believed: its hello even claims the real agent's sha256. Then, for the first
`run_route`, it misbehaves as MODE says. Stdlib only, Python 3.8.
"""

import hashlib
import json
import os
import sys

MODE = sys.argv[1]
AGENT = sys.argv[3]
WORKDIR = sys.argv[sys.argv.index("--workdir") + 1]


def send(obj, raw=None):
    line = raw if raw is not None else json.dumps(dict(obj, proto=1))
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def event(rid, **ev):
    send({"kind": "event", "id": rid, "ev": ev})


def misbehave(rid, request):
    outputs = request.get("outputs") or ""
    out_dir = os.path.dirname(outputs)
    event(rid, ev="loaded", load_ms=1.0)
    if MODE == "nan":
        line = json.dumps({"proto": 1, "kind": "event", "id": rid,
                           "ev": {"ev": "samples", "ms": [1.0, 12345.678]}})
        send(None, raw=line.replace("12345.678", "NaN"))  # what json.dumps(nan) writes
    elif MODE == "negative":
        event(rid, ev="samples", ms=[1.0, -3.0])
    elif MODE == "flood":
        chunk = [1.5] * 150000  # ~0.6 MB a line, under the line cap; 7 lines > 1M samples
        for _ in range(7):
            event(rid, ev="samples", ms=chunk)
    elif MODE == "order":
        send({"kind": "event", "id": rid, "ev": {"ev": "done"}})
        event(rid, ev="samples", ms=[1.0])
    elif MODE == "escape":
        # a path that climbs out of the run's folder, to a file the test watches
        event(rid, ev="samples", ms=[1.0, 1.1, 1.2])
        event(rid, ev="outputs", file=out_dir + "/../../../../" + os.environ["FARM_CANARY"])
    elif MODE == "endless":
        # inside the run's folder, but a symlink to a file that never ends
        os.makedirs(out_dir, exist_ok=True)
        os.symlink("/dev/zero", outputs)
        event(rid, ev="samples", ms=[1.0, 1.1, 1.2])
        event(rid, ev="outputs", file=outputs)
        event(rid, ev="done")
        send({"kind": "end", "id": rid, "status": "done", "message": "", "exit_code": 0,
              "stderr_tail": ""})
        return
    elif MODE == "bigline":
        send(None, raw=json.dumps({"proto": 1, "kind": "log", "id": rid, "text": "x" * (2 << 20)}))
    elif MODE == "unknown":
        send({"kind": "takeover", "id": rid})
    elif MODE == "markup":  # text that rich would take for markup, in the failure message
        send({"kind": "error", "id": None,
              "message": "[/red] the agent [bold]rejects[/] [link=http://x]you[/link]"})
        return
    # a well-formed end, for the modes the host did not stop at once
    send({"kind": "end", "id": rid, "status": "done", "message": "", "exit_code": 0,
          "stderr_tail": ""})


def main():
    with open(AGENT, "rb") as handle:
        claimed = hashlib.sha256(handle.read()).hexdigest()  # lie: "I am the real agent"
    runner = {"ok": True, "reason": "", "runner": "runners/ort_runner.py"}
    send({"kind": "hello", "agent_sha256": claimed, "python": "3.8.0", "pid": os.getpid(),
          "platform": {"system": "Linux", "machine": "x86_64"},
          "cpu": {"arch": "x86_64", "model": "hostile", "features": [], "cores": 1},
          "routes": {"ort": runner, "tvm": runner, "custom": runner}})
    for line in sys.stdin:
        req = json.loads(line)
        rid, op = req.get("id"), req.get("op")
        if op in ("ping", "state", "cancel"):
            send({"kind": "reply", "id": rid, "ok": True, "data": {}})
        elif op == "run_route":
            misbehave(rid, req.get("request") or {})
        elif op == "bye":
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
