"""The agent's `--commit` mode: the device side of an atomic deploy (stdlib only, 3.8+).

Run by the host as `python - --commit PLAN_JSON --workdir W` with the packed agent on
stdin (`farm.deploy.deployer.commit`), before any agent need be on the device: the agent's
own upload is committed this way too. PLAN_JSON lists {"tmp", "final", "sha256", "mode"?}
with paths relative to W. Each uploaded temporary file is hashed; only a matching file is
renamed into place (atomic on one file system) and recorded in the manifest; a file that
does not match is deleted. Answer: {"ok": [final, ...], "bad": [{"final", "error"}, ...]}.
"""
import os

from agent_workdir import file_sha256, read_manifest, write_manifest


def run(workdir, plan):
    manifest = read_manifest(workdir)
    ok, bad = [], []
    for item in plan:
        tmp = os.path.join(workdir, item["tmp"])
        final = os.path.join(workdir, item["final"])
        try:
            got = file_sha256(tmp)
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
    write_manifest(workdir, manifest)
    return {"ok": ok, "bad": bad}
