"""The agent's `--prune` mode: the device side of `farm deploy --prune` (stdlib only, 3.8+).

Run by the host as `python - --prune REQUEST_JSON --workdir W` with the packed agent on
stdin (`farm.deploy.prune`); REQUEST_JSON is {"keep": [relative paths], "part_age_s":
seconds, "dry_run": bool}. The policy (farm/deploy/prune.py documents it) is applied while
holding the agent's device lock (`agent_workdir.try_lock`), so no agent can start a route
on files being removed:
  - a file the manifest lists and `keep` does not is removed (and leaves the manifest);
  - a partial upload (`*.part-<sha12>`, or an old deploy's `*.tmp-<pid>`) untouched for
    `part_age_s` is removed;
  - nothing else is touched: files deploy never wrote (runner outputs in out/, the lock,
    the manifest itself) stay.
Answer: {"removed": [{"file", "bytes", "why"}], "refused": str|null}.
"""
import os
import re
import time

from agent_workdir import lock_path, open_lock, read_manifest, try_lock, write_manifest

# farm.deploy.deployer.part_name, and the temporary names of deploys before resumable parts
PARTIAL = re.compile(r"\.(part-[0-9a-f]{12}|tmp-[0-9]+)$")


def partial(name):
    return PARTIAL.search(os.path.basename(name)) is not None


def run(workdir, request):
    keep = set(request.get("keep") or [])
    age = float(request.get("part_age_s", 600))
    dry = bool(request.get("dry_run"))
    out = {"removed": [], "refused": None}
    if not os.path.isdir(workdir):
        return out
    fd = open_lock(workdir)
    if not try_lock(fd):
        holder = os.read(fd, 4096).decode("utf-8", "replace").strip()
        out["refused"] = "an agent holds the device lock %s: %s" % (
            lock_path(workdir), holder or "(no holder recorded)")
        return out
    manifest = read_manifest(workdir)
    files = manifest["files"]
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
    out["removed"] += stale_parts(workdir, age, dry)
    if not dry:
        write_manifest(workdir, manifest)
    return out


def stale_parts(workdir, age, dry):
    """Partial uploads untouched for `age` seconds (removed unless `dry`); out/ is skipped."""
    removed = []
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
            removed.append({"file": os.path.relpath(path, workdir), "bytes": stat.st_size,
                            "why": "partial upload untouched for %d s"
                            % int(now - stat.st_mtime)})
    return removed
