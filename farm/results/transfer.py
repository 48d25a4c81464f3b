"""Moving runs between stores: `farm results push` (local -> URL) and `pull` (URL -> local).

`copy_runs(src, dst, refs)` copies the runs `refs` name (tags, ids, prefixes, `latest`;
none: every run) with their records from `src` into `dst`, keyed by run id and record id:
what `dst` already holds is left as it is, so pushing twice adds nothing the second time
and two CI jobs pushing the same store do not duplicate it. Each run is one transaction of
`dst` (`Store.import_run`): a push cut short leaves whole runs and, for the run it was
writing, nothing of it. A run `dst` already holds with as many records is skipped without
reading its records (a second push of a big store reads only the run lists). Tags are not
copied: a name such as `main` means one thing per store (`farm results tag` sets it there).

The spill file of a server store (records a bench could not store while the server was
away) is written in when the store is opened, which `push` does first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from farm.results.backend import Store
from farm.results.tags import resolve_runs


@dataclass
class Transfer:
    """What one copy did."""

    runs_seen: int = 0
    runs_added: int = 0
    records_added: int = 0
    runs_skipped: int = 0  # already complete in the destination
    added_runs: list[str] = field(default_factory=list)

    def summary(self, src: str, dst: str) -> str:
        return (f"{self.runs_seen} run(s) of {src}: {self.runs_added} new run(s), "
                f"{self.records_added} new record(s) in {dst}; {self.runs_skipped} run(s) "
                "were already there")


def copy_runs(src: Store, dst: Store, refs: Sequence[str] = ()) -> Transfer:
    wanted = list(dict.fromkeys(r for ref in refs for r in resolve_runs(src, ref)))
    runs = [r for r in src.runs() if not wanted or r.run_id in wanted]
    have = {r.run_id: r.n_records for r in dst.runs()}
    out = Transfer(runs_seen=len(runs))
    for run in runs:
        if have.get(run.run_id, -1) >= run.n_records:
            out.runs_skipped += 1
            continue
        run_added, added = dst.import_run(run, src.records(run.run_id))
        out.runs_added += int(run_added)
        out.records_added += added
        if run_added:
            out.added_runs.append(run.run_id)
    return out
