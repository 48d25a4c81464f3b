"""Stand between the real agent's stdout and the host, and corrupt one line on purpose.

Usage: REAL_AGENT_COMMAND | python inject.py MODE
Every line passes through unchanged, except the first runner `event` line, which is
replaced according to MODE (the real agent, runner and host stay untouched: this is the
only way to make a real bench read a bad line at a chosen moment).
"""

import json
import sys

MODE = sys.argv[1]
out = sys.stdout.buffer
done = False
for raw in sys.stdin.buffer:
    if not done and b'"kind":"event"' in raw:
        done = True
        msg = json.loads(raw)
        if MODE == "garbage":
            raw = b"Segmentation fault (core dumped) -- not a protocol line\n"
        elif MODE == "oversize":
            msg = {"proto": 1, "kind": "log", "id": msg["id"], "text": "z" * (2 << 20)}
            raw = (json.dumps(msg) + "\n").encode()
        elif MODE == "wrong_types":
            msg["ev"] = {"ev": "samples", "ms": ["fast", True]}
            raw = (json.dumps(msg) + "\n").encode()
        elif MODE == "not_an_object":
            raw = b'["proto", 1, "kind", "event"]\n'
        elif MODE == "other_proto":
            msg["proto"] = 2
            raw = (json.dumps(msg) + "\n").encode()
        elif MODE == "unknown_kind":
            msg["kind"] = "teleport"
            raw = (json.dumps(msg) + "\n").encode()
        elif MODE == "bool_exit_code":
            raw = (json.dumps({"proto": 1, "kind": "end", "id": msg["id"], "status": "done",
                               "message": "", "exit_code": False, "stderr_tail": ""})
                   + "\n").encode()
    out.write(raw)
    out.flush()
