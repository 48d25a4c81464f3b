"""ONNX Runtime route runner: one model, one process, JSON lines on stdout.

Runs on the device's own Python (3.8+) with numpy and onnxruntime only, so: no syntax newer
than 3.8, no runtime-evaluated annotations. Started by the agent as
``python ort_runner.py --request FILE.json`` (contract: docs/ARCHITECTURE.md).

Request: {"route": "ort", "model": PATH, "inputs": FTNS PATH or null, "outputs": FTNS PATH or
null, "threads": int (0/null = ORT default), "policy": {...}, "profile_runs": K,
"options": {"provider": "CPUExecutionProvider", "opt_level": "disable|basic|extended|all"
(default all), "seed": int (inputs are generated from it when "inputs" is null),
"allow_fallback": false, "profile_dir": PATH (default: a temp dir, deleted),
"keep_profile": false, "session_config": {key: value} (default DEFAULT_SESSION_CONFIG; {}
= ORT's own defaults)}}.

Events, in this order: loaded, first, warmup, samples (batched, repeats), outputs, memory
(measured BEFORE the profiling session is created, so the peak is the timed session's own;
`baseline_kb` is the peak before any session or model: the runtime's idle cost),
ops (only when profile_runs > 0), info (ort_version, python, providers_available, provider,
opt_level, threads, node_count after optimisation, node_providers {provider: nodes},
session_options (read back from the timed session: ORT's values, not the request's),
session_config (the config entries the session carries), quantizer (the options the
model's quantizer ran with, from its metadata `farm.quantizer`, or null)), done.

Session config used by default: `session.intra_op.allow_spinning` = "1" (ORT's own default,
named on the record). Idle intra-op workers spin between the ~1000 kernels of an inference
instead of blocking, so a parallel kernel does not wait for a futex wake-up. On the idle 2-vCPU
farm host (mobilebert, 2 threads, medians of 3 s) spinning ran fp32 28.9 ms vs 41.7 ms without
it, int8-dynamic 19.4 vs 24.1, int8-qdq 36.6 vs 49.8: without spinning 2 threads were slower
than 1. (Under heavy load from other processes the opposite held, 2.5-3x: a spinning worker
burns the core the other thread needs; a benchmark belongs on a quiet device, and the custom
executor's pool spins too, so both routes wait the same way.) A request's own
"session_config" replaces it.
Any failure: info (with what was known) then {"ev": "error", "message": ...}, exit status 1.

Per-op times: a second session with enable_profiling runs K+1 times; the first profiled run is
a warm-up and is dropped (node events are assigned to runs by the `model_run` windows); node
durations (`cat == "Node"`, name ending `_kernel_time`, µs) are summed per run and the median
over runs is kept per node (one preempted run moves a mean, not a median). `total_ms`
is the sum of node times, `run_ms` the median of ORT's own `model_run` durations (the difference
is executor overhead between kernels). Categories come from categories.py next to this file (bench
preparation uploads farm/categories.py into runners/; in the repo it is found at
../../farm/), ftns.py from here or the parent directory.

Silent fallback is an error unless options.allow_fallback: for a non-CPU provider the session
is created with `session.disable_cpu_ep_fallback`, so a partial placement fails at load time,
before timing (one profiled run with fallback allowed then names the nodes); and at least one
profiled run always happens after timing, checking the provider every node actually ran on.
Relative paths in the request are relative to the working directory (the agent runs us in
the device work dir).
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
OPT_LEVELS = ("disable", "basic", "extended", "all")
SAMPLE_BATCH_S = 0.5  # emit a samples line at least this often during measurement
SAMPLE_BATCH_MAX = 2000  # ... and at most this many per line (the wire caps lines at 1 MiB)
MAX_NODES = 3000  # beyond this, the ops event keeps the most expensive nodes only
KERNEL_SUFFIX = "_kernel_time"
DEFAULT_SESSION_CONFIG = {"session.intra_op.allow_spinning": "1"}
QUANTIZER_METADATA = "farm.quantizer"
ORT_NUMPY_TYPES = {"tensor(float)": "float32", "tensor(int64)": "int64",
                   "tensor(int32)": "int32", "tensor(int8)": "int8", "tensor(uint8)": "uint8"}


class RunnerError(Exception):
    """A failure with a message for the host (no traceback needed)."""


class CpuFallbackRefused(RunnerError):
    """ORT would have put nodes on its CPU fallback, and session creation was told not to."""


def _import_sibling(name, candidates):
    """Import `name`.py from the first candidate directory holding it (deploy layout, repo)."""
    import importlib.util
    for directory in candidates:
        path = os.path.join(directory, name + ".py")
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location("farm_runner_" + name, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    raise RunnerError("%s.py not found next to the runner (looked in %s); redeploy the device"
                      % (name, ", ".join(candidates)))


def _ftns():
    return _import_sibling("ftns", [HERE, os.path.join(HERE, ".."),
                                    os.path.join(HERE, "..", "agent")])


def _categories():
    return _import_sibling("categories", [HERE, os.path.join(HERE, "..", "..", "farm")])


class Emitter(object):
    def __init__(self, stream):
        self.stream = stream

    def __call__(self, ev, **fields):
        fields = dict(fields)
        line = dict([("ev", ev)] + sorted(fields.items()))
        self.stream.write(json.dumps(line, separators=(",", ":")) + "\n")
        self.stream.flush()


def log(msg):
    sys.stderr.write("ort_runner: %s\n" % msg)
    sys.stderr.flush()


def session_options(ort, options, threads, profile_prefix=None):
    level = options.get("opt_level", "all")
    if level not in OPT_LEVELS:
        raise RunnerError("opt_level %r is not one of %s" % (level, ", ".join(OPT_LEVELS)))
    levels = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
              "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
              "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
              "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
    so = ort.SessionOptions()
    so.graph_optimization_level = levels[level]
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = int(threads)
        so.inter_op_num_threads = 1
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    for key, value in sorted(session_config(options).items()):
        so.add_session_config_entry(str(key), str(value))
    if options.get("provider", "CPUExecutionProvider") != "CPUExecutionProvider" and \
            not options.get("allow_fallback"):
        # fail at load time, before any timing, instead of after the samples
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    return so


def session_config(options):
    """The config entries a session gets: the request's, else DEFAULT_SESSION_CONFIG."""
    config = options.get("session_config")
    if config is None:
        return dict(DEFAULT_SESSION_CONFIG)
    if not isinstance(config, dict):
        raise RunnerError("options.session_config must be an object of key: value strings")
    return dict(config)


def read_back(sess, options):
    """What the session actually runs with (ORT's values, read from the session)."""
    so = sess.get_session_options()
    facts = {}
    for name in ("graph_optimization_level", "execution_mode", "intra_op_num_threads",
                 "inter_op_num_threads", "enable_cpu_mem_arena", "enable_mem_pattern",
                 "enable_mem_reuse", "use_deterministic_compute", "use_per_session_threads"):
        value = getattr(so, name, None)
        facts[name] = value if isinstance(value, (bool, int, float)) or value is None \
            else str(value)
    config = {}
    keys = set(session_config(options)) | set(["session.disable_cpu_ep_fallback"])
    for key in sorted(keys):
        try:
            config[key] = so.get_session_config_entry(key)
        except Exception:  # ORT raises for a key the session does not carry
            pass
    return facts, config


def quantizer_options(sess):
    """The quantizer's options the model file records (farm's quantize.py writes them)."""
    try:
        raw = sess.get_modelmeta().custom_metadata_map.get(QUANTIZER_METADATA)
    except Exception:
        return None
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return {"unparsed": raw[:200]}


def make_session(ort, model, options, threads, profile_prefix=None):
    provider = options.get("provider", "CPUExecutionProvider")
    available = ort.get_available_providers()
    if provider not in available:
        raise RunnerError("execution provider %s is not available in onnxruntime %s on this "
                          "device (available: %s)"
                          % (provider, ort.__version__, ", ".join(available)))
    so = session_options(ort, options, threads, profile_prefix)
    try:
        return ort.InferenceSession(model, so, providers=[provider])
    except Exception as exc:
        if "fallback to CPU EP has been explicitly disabled" in str(exc):
            raise CpuFallbackRefused("onnxruntime would run some nodes of %s on its CPU "
                                     "fallback instead of %s" % (model, provider))
        raise RunnerError("onnxruntime could not load %s with %s: %s"
                          % (model, provider, str(exc).strip().splitlines()[0]))


def generated_inputs(np, sess, seed):
    """Inputs when the request has none: ids in [0,100), masks of ones, floats N(0,1)."""
    rng = np.random.RandomState(seed)
    feeds = {}
    for inp in sess.get_inputs():
        shape = [d if isinstance(d, int) else (1 if i == 0 else 128)
                 for i, d in enumerate(inp.shape)]
        if "float" in inp.type:
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
        elif "mask" in inp.name.lower():
            feeds[inp.name] = np.ones(shape, dtype=np.int64)
        else:
            feeds[inp.name] = rng.randint(0, 100, size=shape).astype(np.int64)
    return feeds


def load_inputs(np, ftns, sess, request):
    path = request.get("inputs")
    if not path:
        return generated_inputs(np, sess, int(request.get("options", {}).get("seed", 0)))
    try:
        tensors = ftns.read(path)
    except (OSError, ValueError) as exc:
        raise RunnerError("cannot read inputs %s: %s" % (path, exc))
    wanted = [i.name for i in sess.get_inputs()]
    missing = [n for n in wanted if n not in tensors]
    if missing:
        raise RunnerError("inputs %s lack %s needed by the model (file has: %s)"
                          % (path, ", ".join(missing), ", ".join(tensors)))
    feeds = {}
    for meta in sess.get_inputs():
        arr = tensors[meta.name]
        want = ORT_NUMPY_TYPES.get(meta.type)
        if want is not None and arr.dtype != np.dtype(want):
            ints = arr.dtype.kind in "iu" and np.dtype(want).kind in "iu"
            if not ints:  # only integer widths convert; f32 vs ids is a wrong file
                raise RunnerError("input %s in %s is %s but the model wants %s"
                                  % (meta.name, path, arr.dtype, meta.type))
            arr = arr.astype(want)  # e.g. i64 token ids for an int32 model input
        feeds[meta.name] = arr
    return feeds


def policy_loop(sess, feeds, policy, emit):
    """Warm-up then steady-state samples, per the shared policy (docs/ARCHITECTURE.md)."""
    clock = time.perf_counter
    warmup_runs = int(policy.get("warmup_runs", 1))
    warmup_min_s = float(policy.get("warmup_min_s", 0.0))
    min_runs = int(policy.get("min_runs", 10))
    min_time_s = float(policy.get("min_time_s", 0.0))
    max_time_s = float(policy.get("max_time_s", 60.0))

    runs, start = 0, clock()
    while runs < warmup_runs or clock() - start < warmup_min_s:
        sess.run(None, feeds)
        runs += 1
    emit("warmup", runs=runs, ms_total=(clock() - start) * 1e3)

    batch, n = [], 0
    start = last_emit = clock()
    while (n < min_runs or clock() - start < min_time_s) and clock() - start < max_time_s:
        t0 = clock()
        sess.run(None, feeds)
        t1 = clock()
        batch.append((t1 - t0) * 1e3)
        n += 1
        if t1 - last_emit >= SAMPLE_BATCH_S or len(batch) >= SAMPLE_BATCH_MAX:
            emit("samples", ms=batch)
            batch, last_emit = [], clock()
    if batch or n == 0:
        emit("samples", ms=batch)
    return n


def write_outputs(np, ftns, sess, values, path):
    out = {}
    for meta, value in zip(sess.get_outputs(), values):
        arr = np.asarray(value)
        if arr.dtype == np.float16 or arr.dtype == np.float64:
            arr = arr.astype(np.float32)  # FTNS carries f32; the cross-route check uses f32
        elif arr.dtype == np.bool_:
            arr = arr.astype(np.uint8)
        out[meta.name] = arr
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        os.makedirs(parent)
    ftns.write(path, out)


def memory():
    """Peak RSS (VmHWM) and current PSS of this process, and how they were read."""
    vmhwm, pss, method = None, None, []
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    vmhwm = int(line.split()[1])
                    method.append("/proc/self/status VmHWM")
    except OSError:
        pass
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1])
                    method.append("/proc/self/smaps_rollup Pss")
    except OSError:
        pass
    if vmhwm is None:
        import resource
        vmhwm = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        if sys.platform == "darwin":
            vmhwm //= 1024  # bytes there, kB on Linux
        method.append("getrusage ru_maxrss")
    return vmhwm, pss, " + ".join(method)


def parse_profile(path, skip_runs):
    """Per-run node events from an ORT profile: (runs, [[event, ...] per run], run_ms list)."""
    with open(path) as f:
        events = json.load(f)
    windows = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                     if e.get("cat") == "Session" and e.get("name") == "model_run")
    per_run = [[] for _ in windows]
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith(KERNEL_SUFFIX):
            continue
        for i, (lo, hi) in enumerate(windows):
            if lo <= e["ts"] <= hi:
                per_run[i].append(e)
                break
    run_ms = [(hi - lo) / 1e3 for lo, hi in windows[skip_runs:]]
    return per_run[skip_runs:], run_ms


def summarize_nodes(categories, per_run):
    """Median node time over the profiled runs (a run preempted on a busy device moves a
    mean, not a median), categorized; nodes keep first-seen (execution) order."""
    runs = len(per_run)
    nodes, order = {}, []
    for run, events in enumerate(per_run):
        for e in events:
            name = e["name"][:-len(KERNEL_SUFFIX)]
            args = e.get("args", {})
            node = nodes.get(name)
            if node is None:
                shapes = [list(d.values())[0] for d in args.get("input_type_shape", []) if d]
                op = args.get("op_name", "")
                node = {"name": name, "op": op,
                        "category": categories.categorize("ort", op, name, shapes),
                        "us": [0.0] * runs, "provider": args.get("provider", "")}
                nodes[name] = node
                order.append(name)
            node["us"][run] += float(e["dur"])
    out = []
    for name in order:
        node = nodes[name]
        out.append({"name": name, "op": node["op"], "category": node["category"],
                    "ms": statistics.median(node["us"]) / 1e3, "provider": node["provider"]})
    return out


def profile(ort, categories, request, feeds):
    options = request.get("options", {})
    k = max(1, int(request.get("profile_runs", 0) or 0))
    keep = bool(options.get("keep_profile"))
    profile_dir = options.get("profile_dir") or tempfile.mkdtemp(prefix="ort-profile-")
    try:
        if not os.path.isdir(profile_dir):
            os.makedirs(profile_dir)
        sess = make_session(ort, request["model"], options, request.get("threads"),
                            os.path.join(profile_dir, "ort"))
        for _ in range(k + 1):
            sess.run(None, feeds)
        path = sess.end_profiling()
        per_run, run_ms = parse_profile(path, skip_runs=1)
    finally:
        if not keep and not options.get("profile_dir"):
            shutil.rmtree(profile_dir, ignore_errors=True)
    if not per_run or not any(per_run):
        raise RunnerError("onnxruntime's profile of %s has no node events" % request["model"])
    return summarize_nodes(categories, per_run), run_ms


def diagnose_fallback(np, ort, ftns, categories, request, refused):
    """Name the nodes that would fall back, from one profiled run with fallback allowed."""
    options = dict(request["options"], allow_fallback=True)
    diag = dict(request, options=options, profile_runs=1)
    sess = make_session(ort, request["model"], options, request.get("threads"))
    feeds = load_inputs(np, ftns, sess, request)
    del sess
    nodes, _ = profile(ort, categories, diag, feeds)
    check_providers(nodes, request["options"].get("provider"), False)
    raise refused  # every node landed on the EP after all: report ORT's refusal as is


def check_providers(nodes, requested, allow_fallback):
    counts = {}
    for node in nodes:
        counts[node["provider"]] = counts.get(node["provider"], 0) + 1
    strays = [n for n in nodes if n["provider"] != requested]
    if strays and not allow_fallback:
        shown = ", ".join("%s (%s)" % (n["name"], n["op"]) for n in strays[:8])
        raise RunnerError(
            "%d of %d nodes did not run on the requested %s: %s ran them (%s%s); refusing a "
            "silent fallback (set options.allow_fallback to accept it)"
            % (len(strays), len(nodes), requested,
               ", ".join(sorted(set(n["provider"] for n in strays))), shown,
               ", ..." if len(strays) > 8 else ""))
    return counts


def runtime_bytes(ort):
    """Bytes of ORT's native libraries on this device (the runtime a shipped app carries)."""
    capi = os.path.join(os.path.dirname(ort.__file__), "capi")
    total = 0
    try:
        for name in os.listdir(capi):
            if ".so" in name or name.endswith(".pyd") or name.endswith(".dylib"):
                total += os.path.getsize(os.path.join(capi, name))
    except OSError:
        return None
    return total


def run(request, emit, info):
    """The whole route; `info` collects route facts as they become known (emitted by main)."""
    import numpy as np
    import onnxruntime as ort

    options = request.get("options") or {}
    request["options"] = options
    provider = options.get("provider", "CPUExecutionProvider")
    info.update({"ort_version": ort.__version__, "python": sys.version.split()[0],
                 "providers_available": ort.get_available_providers(), "provider": provider,
                 "opt_level": options.get("opt_level", "all"),
                 "threads": request.get("threads"),
                 "runtime_bytes": runtime_bytes(ort)})
    ftns, categories = _ftns(), _categories()
    # the idle baseline: Python, numpy and onnxruntime imported, no session or model yet
    # (the decision matrix judges memory on what the model adds, the same way per route)
    baseline_kb = memory()[0]

    t0 = time.perf_counter()
    try:
        sess = make_session(ort, request["model"], options, request.get("threads"))
    except CpuFallbackRefused as refused:
        diagnose_fallback(np, ort, ftns, categories, request, refused)
    emit("loaded", load_ms=(time.perf_counter() - t0) * 1e3)
    info["session_options"], info["session_config"] = read_back(sess, options)
    info["quantizer"] = quantizer_options(sess)
    feeds = load_inputs(np, ftns, sess, request)

    t0 = time.perf_counter()
    first = sess.run(None, feeds)
    emit("first", ms=(time.perf_counter() - t0) * 1e3)
    policy_loop(sess, feeds, request.get("policy") or {}, emit)

    if request.get("outputs"):
        write_outputs(np, ftns, sess, first, request["outputs"])
        emit("outputs", file=request["outputs"])
    vmhwm, pss, method = memory()
    emit("memory", vmhwm_kb=vmhwm, pss_kb=pss, baseline_kb=baseline_kb, method=method)
    del sess

    nodes, run_ms = profile(ort, categories, request, feeds)
    info["node_count"] = len(nodes)  # after graph optimisation: what actually ran
    info["node_providers"] = check_providers(nodes, provider, bool(options.get("allow_fallback")))
    if int(request.get("profile_runs", 0) or 0) > 0:
        totals = dict((c, 0.0) for c in categories.CATEGORIES)
        for node in nodes:
            totals[node["category"]] += node["ms"]
        shown = nodes
        if len(nodes) > MAX_NODES:
            keep = set(id(n) for n in sorted(nodes, key=lambda n: -n["ms"])[:MAX_NODES])
            shown = [n for n in nodes if id(n) in keep]
        emit("ops", categories=totals, total_ms=sum(totals.values()),
             run_ms=statistics.median(run_ms), runs=len(run_ms), nodes=shown,
             nodes_dropped=len(nodes) - len(shown))


def main(argv=None):
    parser = argparse.ArgumentParser(description="ONNX Runtime route runner (JSON lines out)")
    parser.add_argument("--request", required=True, help="request JSON file")
    args = parser.parse_args(argv)
    emit = Emitter(sys.stdout)
    info = {}
    try:
        with open(args.request) as f:
            request = json.load(f)
        if not request.get("model"):
            raise RunnerError("request %s has no model path" % args.request)
        run(request, emit, info)
    except Exception as exc:  # report anything: the host must never wait on a silent runner
        if not isinstance(exc, RunnerError):
            traceback.print_exc(file=sys.stderr)
        message = str(exc) if isinstance(exc, RunnerError) else "%s: %s" % (
            type(exc).__name__, exc)
        if info:
            emit("info", **info)
        emit("error", message=message)
        return 1
    emit("info", **info)
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
