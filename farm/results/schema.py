"""The one ordered, typed field list of a benchmark record (llama-bench style).

Every printer (md/csv/json/jsonl) and the SQLite table are generated from `FIELDS`;
adding a field here adds it everywhere. `SCHEMA_VERSION` is stored with the data: a
store of an older version is migrated in place when opened (`farm.results.migrate` adds the
columns of fields added since — bump the version whenever you add a field), a newer one is
refused with a clear message.

One record = one (run, device, route, configuration) measurement. `samples_ms` keeps
every raw steady-state sample; all statistics are recomputable from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SCHEMA_VERSION = 5  # history in farm/results/migrate.py

# status values
OK = "ok"                    # measured, outputs matched
INVALID = "invalid"          # measured, but outputs mismatched beyond tolerance
PARTIAL = "partial"          # device failed mid-run; this route finished before that
FAILED = "failed"            # this route failed on this device
UNAVAILABLE = "unavailable"  # route cannot run there (reason in status_detail)


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # "text" | "int" | "real" | "json"
    help: str


FIELDS: tuple[Field, ...] = (
    Field("record_id", "text", "unique id of this record"),
    Field("run_id", "text", "the bench invocation this record belongs to"),
    Field("created_utc", "text", "UTC time the record was written (ISO 8601)"),
    Field("farm_version", "text", "farm version on the host"),
    Field("farm_commit", "text", "git commit of farm on the host"),
    Field("agent_hash", "text", "sha256 of the agent file that ran on the device"),
    Field("device", "text", "inventory name of the device"),
    Field("transport", "text", "local | ssh | tvm-rpc"),
    Field("arch", "text", "device architecture"),
    Field("triple", "text", "target triple"),
    Field("cpu_info", "json", "CPU model, features and cores as read on the device"),
    Field("route", "text", "ort | tvm | custom"),
    Field("model", "text", "model name or path"),
    Field("variant", "text", "fp32 | int8-dynamic | int8-qdq | int4"),
    Field("model_hash", "text", "sha256 of the model file"),
    Field("build_flags", "json", "route configuration: provider, opt level, fusion, schedules"),
    Field("threads", "int", "intra-op threads"),
    Field("status", "text", "ok | invalid | partial | failed | unavailable"),
    Field("status_detail", "text", "why, for any status other than ok"),
    Field("n", "int", "number of steady-state samples"),
    Field("median_ms", "real", "median of samples_ms"),
    Field("p90_ms", "real", "90th percentile of samples_ms"),
    Field("p99_ms", "real", "99th percentile of samples_ms"),
    Field("mean_ms", "real", "mean of samples_ms"),
    Field("stddev_ms", "real", "sample standard deviation of samples_ms"),
    Field("cv", "real", "coefficient of variation (stddev / mean)"),
    Field("min_ms", "real", "minimum of samples_ms"),
    Field("max_ms", "real", "maximum of samples_ms"),
    Field("ci95_low_ms", "real", "bootstrap 95% CI of the median, low end"),
    Field("ci95_high_ms", "real", "bootstrap 95% CI of the median, high end"),
    Field("round_medians_ms", "json", "median of each round's samples, in round order"),
    Field("ci_method", "text", "how the CI of the median was computed (hierarchical "
                               "bootstrap over rounds, or one round's samples)"),
    Field("load_ms", "real", "time to load the model/artifact in the fresh process"),
    Field("first_run_ms", "real", "first inference, apart from warm-up and steady state"),
    Field("warmup_runs", "int", "warm-up inferences done before measuring"),
    Field("samples_ms", "json", "every raw steady-state sample, in order"),
    Field("ops", "json", "per-op profile: {categories: {cat: ms}, nodes: [...], coverage}"),
    Field("peak_vmhwm_kb", "int", "VmHWM of the route's own process"),
    Field("peak_pss_kb", "int", "Pss from /proc/self/smaps_rollup, when available"),
    Field("memory_method", "text", "how peak memory was read"),
    Field("memory_baseline_kb", "int", "VmHWM of the runner idle: runtime loaded, no "
                                       "model or session (the route's own is the rest)"),
    Field("state_before", "json", "device state before the route (governor, freqs, thermal, load)"),
    Field("state_after", "json", "device state after the route"),
    Field("drift", "json", "frequency/temperature drift flags during the route"),
    Field("accuracy", "json", "output comparison: reference, max abs/rel diff, tolerance, ok"),
    Field("sizes", "json", "bytes: runtime, code, weights"),
    Field("policy", "json", "measurement policy: warmup, min runs, min/max time, seed"),
    Field("rounds", "json", "rounds of the route: planned, done, samples per round, CPU "
                            "steal and load per round; why it stopped early and the record "
                            "it resumed, if so"),
    Field("emulated", "int", "1 when the device ran under an emulator (inventory flag or "
                             "the agent's qemu-user probe): latency not ranked or gated"),
    Field("isa", "text", "ISA level the route's kernels were allowed (farm/isa.py): the cap "
                         "(FARM_ISA / --isa) for routes that honour one (tvm, custom), else "
                         "the device's own level (ORT dispatches by itself)"),
)

FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in FIELDS)

# the status_detail of a record a later `--resume` replaced: kept as history, not a result
SUPERSEDED = "superseded by record"


def is_superseded(record: dict[str, Any]) -> bool:
    return (record.get("status_detail") or "").startswith(SUPERSEDED)


def unfinished_rounds(record: dict[str, Any]) -> bool:
    """A `partial` record whose route stopped before its last round (a resume finishes it),
    as opposed to a whole route kept `partial` because the device failed later."""
    rounds = record.get("rounds") or {}
    return (record.get("status") == PARTIAL and not is_superseded(record)
            and int(rounds.get("done") or 0) < int(rounds.get("planned") or 0))


def empty_record(**values: Any) -> dict[str, Any]:
    """A record with every field present (None where unknown); unknown keys are an error."""
    unknown = set(values) - set(FIELD_NAMES)
    if unknown:
        raise KeyError(f"not record fields: {sorted(unknown)}")
    return {name: values.get(name) for name in FIELD_NAMES}
