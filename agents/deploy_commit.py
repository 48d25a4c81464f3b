"""Device side of an atomic deploy (stdlib only, Python 3.8+).

Run as `python - WORKDIR PLAN_JSON < deploy_commit.py`. PLAN_JSON lists
{"tmp", "final", "sha256"} paths relative to WORKDIR. Each uploaded temporary file is
hashed; only a matching file is renamed into place (atomic on one filesystem) and
recorded in WORKDIR/manifest.json. Prints one JSON object: {"ok": [...], "bad": [...]}.
"""
import hashlib
import json
import os
import sys


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def main():
    workdir, plan = sys.argv[1], json.loads(sys.argv[2])
    manifest_path = os.path.join(workdir, "manifest.json")
    try:
        with open(manifest_path) as handle:
            manifest = json.load(handle)
    except (OSError, ValueError):
        manifest = {"version": 1, "files": {}}
    ok, bad = [], []
    for item in plan:
        tmp = os.path.join(workdir, item["tmp"])
        final = os.path.join(workdir, item["final"])
        try:
            got = sha256(tmp)
        except OSError as exc:
            bad.append({"final": item["final"], "error": str(exc)})
            continue
        if got != item["sha256"]:
            os.unlink(tmp)
            bad.append({"final": item["final"], "error": "sha256 mismatch after upload: "
                        + got[:12] + " != " + item["sha256"][:12]})
            continue
        if item.get("mode"):
            os.chmod(tmp, int(item["mode"], 8))
        os.replace(tmp, final)
        stat = os.stat(final)
        manifest["files"][item["final"]] = {"sha256": got, "size": stat.st_size,
                                            "mtime_ns": stat.st_mtime_ns}
        ok.append(item["final"])
    tmp_manifest = manifest_path + ".tmp" + str(os.getpid())
    with open(tmp_manifest, "w") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
    os.replace(tmp_manifest, manifest_path)
    sys.stdout.write(json.dumps({"ok": ok, "bad": bad}) + "\n")


if __name__ == "__main__":
    main()
