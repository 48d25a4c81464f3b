"""Device side of `farm deploy --prune` (stdlib only, Python 3.8+).

Run as `python - WORKDIR REQUEST_JSON < deploy_prune.py`; REQUEST_JSON is
{"keep": [relative paths], "part_age_s": seconds, "dry_run": bool}. The policy (the host's
farm/deploy/prune.py documents it) is applied while holding the agent's device lock
(flock on WORKDIR/agent.lock), so no agent can start a route on files being removed:
  - a file the manifest lists and `keep` does not is removed (and leaves the manifest);
  - a partial upload (`*.part-<sha12>`, or an old deploy's `*.tmp-<pid>`) untouched for
    `part_age_s` is removed;
  - nothing else is touched: files deploy never wrote (runner outputs in out/, the lock,
    the manifest itself) stay.
Prints one JSON object: {"removed": [{"file", "bytes", "why"}], "refused": str|null}.
"""
import fcntl
import json
import os
import re
import sys
import time

# farm.deploy.deployer.part_name, and the temporary names of deploys before resumable parts
PARTIAL = re.compile(r"\.(part-[0-9a-f]{12}|tmp-[0-9]+)$")


def partial(name):
    return PARTIAL.search(os.path.basename(name)) is not None


def main():
    workdir, request = sys.argv[1], json.loads(sys.argv[2])
    keep = set(request.get("keep") or [])
    age = float(request.get("part_age_s", 600))
    dry = bool(request.get("dry_run"))
    out = {"removed": [], "refused": None}
    if not os.path.isdir(workdir):
        sys.stdout.write(json.dumps(out) + "\n")
        return
    fd = os.open(os.path.join(workdir, "agent.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.read(fd, 4096).decode("utf-8", "replace").strip()
        out["refused"] = "an agent holds the device lock %s/agent.lock: %s" % (
            workdir, holder or "(no holder recorded)")
        sys.stdout.write(json.dumps(out) + "\n")
        return
    manifest_path = os.path.join(workdir, "manifest.json")
    try:
        with open(manifest_path) as handle:
            manifest = json.load(handle)
    except (OSError, ValueError):
        manifest = {"version": 1, "files": {}}
    files = manifest.get("files") or {}
    for name in sorted(files):
        if name in keep:
            continue
        path = os.path.join(workdir, name)
        size = os.path.getsize(path) if os.path.isfile(path) else 0
        if not dry:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            del files[name]
        out["removed"].append({"file": name, "bytes": size, "why": "not in the selection"})
    now = time.time()
    for root, dirs, names in os.walk(workdir):
        dirs[:] = [d for d in dirs if not (root == workdir and d == "out")]
        for base in names:
            path = os.path.join(root, base)
            if not partial(base):
                continue
            stat = os.stat(path)
            if now - stat.st_mtime < age:
                continue  # may be a deploy in progress
            if not dry:
                os.unlink(path)
            out["removed"].append({"file": os.path.relpath(path, workdir),
                                   "bytes": stat.st_size,
                                   "why": "partial upload untouched for %d s"
                                   % int(now - stat.st_mtime)})
    if not dry:
        manifest["files"] = files
        tmp = manifest_path + ".tmp" + str(os.getpid())
        with open(tmp, "w") as handle:
            json.dump(manifest, handle, indent=1, sort_keys=True)
        os.replace(tmp, manifest_path)
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
