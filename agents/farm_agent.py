"""farm on-device agent: stdlib only, Python 3.8+, speaks farm protocol 1.

The device runs it as one file, `agent/farm_agent-<sha12>.py`: this module with the
agents/agent_*.py modules it imports packed in (`farm.devices.agent_program`), so agents
of several farm versions sit side by side, each with its own modules. Started by the host
as `python -u farm_agent-<sha12>.py --workdir W [--holder H] [--reap-stale] [--idle-timeout
S]`. stdout carries only protocol lines (JSON objects, one per line, flushed, at most
MAX_LINE_BYTES); logs go to stderr. The protocol is documented in farm/protocol/wire.py on
the host; the constants below must agree with it.

The same program, piped to `python -` before or besides any deployed agent, has one-shot
modes that print one JSON line and exit: `--probe` (`farm devices check`), and deploy's
`--commit` and `--prune` (MODES: agents/agent_commit.py, agents/agent_prune.py).

What it does:
- takes the device lock `<workdir>/agent.lock` (flock: the kernel releases it when this
  process dies, so a crashed agent never blocks the device); `--reap-stale` first kills a
  leftover agent of an earlier, dead host session (a cut link leaves one running);
- starts clean: what a killed agent left behind (the lock naming its dead pid, the process
  group of its runner, request files under out/requests/) is cleared, each step logged;
- sends `hello` (protocol version, own sha256, python, platform, CPU, which routes can run
  here and why not);
- answers `ping`, `state`, `run_route`, `cancel`, `bye`. Each route runs in a FRESH child
  process in its own process group (so its peak memory is its own and it can be killed as a
  whole), its JSON lines relayed as `event`s, then an `end`;
- exits, killing its children, on stdin EOF, `bye`, SIGTERM/SIGHUP, a broken stdout, or when
  the host has been silent for `--idle-timeout` seconds.
"""

import argparse
import errno
import glob
import importlib
import json
import os
import platform
import select
import signal
import subprocess
import sys
import threading
import time

from agent_workdir import file_sha256, lock_path, open_lock, try_lock

PROTO = 1
MAX_LINE_BYTES = 1 << 20
ROUTE_TABLE = "routes.json"  # under runners/: the routes deploy shipped (host registry)
# deploy's modes: `--MODE REQUEST_JSON` runs agents/agent_<MODE>.py (imported only then)
MODES = {"commit": ("PLAN_JSON", "put uploaded files in place after checking their sha256 "
                                 "(`farm deploy`)"),
         "prune": ("REQUEST_JSON", "remove what deploy's selection no longer ships, under the "
                                   "device lock (`farm deploy --prune`)")}
# farm feature name -> /proc/cpuinfo flag (same names as the inventory; Linux spells AVX-512
# VNNI `avx512_vnni`, farm/inventory/builtin.py maps the same flags the other way)
X86_FLAGS = {"avx2": "avx2", "fma": "fma", "avx512f": "avx512f", "avx512bw": "avx512bw",
             "avx512vnni": "avx512_vnni", "avxvnni": "avx_vnni", "f16c": "f16c",
             "sse4.2": "sse4_2", "amx-tile": "amx_tile", "amx-int8": "amx_int8"}
ARM_FLAGS = {"neon": "asimd", "dotprod": "asimddp", "i8mm": "i8mm", "sve": "sve",
             "fp16": "fphp"}


def log(message):
    sys.stderr.write("farm_agent[%d]: %s\n" % (os.getpid(), message))
    sys.stderr.flush()


# ----------------------------------------------------------------------------- output
class Output(object):
    """Writes protocol lines to fd 1 under a lock; a broken pipe means the host is gone."""

    def __init__(self, on_broken):
        self._lock = threading.Lock()
        self._on_broken = on_broken

    def send(self, message):
        message = dict(message)
        message["proto"] = PROTO
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode("utf-8")
        if len(data) > MAX_LINE_BYTES:
            data = (json.dumps({"proto": PROTO, "kind": "error", "id": message.get("id"),
                                "message": "agent: a %s line of %d bytes exceeds the cap of %d"
                                % (message.get("kind"), len(data), MAX_LINE_BYTES)}) +
                    "\n").encode("utf-8")
        with self._lock:
            try:
                view = memoryview(data)
                while view:
                    written = os.write(1, view)
                    view = view[written:]
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.EBADF, errno.EIO):
                    self._on_broken()
                raise


class LineReader(object):
    """Lines from a file descriptor with a size cap and a select() timeout."""

    def __init__(self, fd):
        self.fd = fd
        self.buffer = b""
        self.eof = False
        self.dropping = False  # inside an oversize line: discard up to its newline

    def read_line(self, timeout):
        """(line bytes | None, status) with status "line", "timeout", "eof" or "oversize"."""
        deadline = time.monotonic() + timeout
        while True:
            newline = self.buffer.find(b"\n")
            if newline >= 0:
                line, self.buffer = self.buffer[:newline], self.buffer[newline + 1:]
                if self.dropping or len(line) > MAX_LINE_BYTES:
                    self.dropping = False
                    return line[:80], "oversize"
                return line, "line"
            if len(self.buffer) > MAX_LINE_BYTES:
                # keep an excerpt for the error message, drop the rest up to the newline
                self.dropping = True
                self.buffer = self.buffer[:80]
            if self.eof:
                return None, "eof"
            left = deadline - time.monotonic()
            if left <= 0:
                return None, "timeout"
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.fd, 65536)
            if not chunk:
                self.eof = True
                if self.buffer and not self.dropping:
                    line, self.buffer = self.buffer, b""
                    return line, "line"
                continue
            self.buffer += chunk


# ----------------------------------------------------------------------------- facts
def read_text(path, default=None):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (OSError, ValueError):
        return default


def pid_running(pid):
    """True while the process exists and is not a zombie waiting for its parent."""
    stat = read_text("/proc/%d/stat" % pid)
    if not stat:
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def group_members(pgid):
    """Pids of the live processes in process group `pgid` (from /proc)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = read_text("/proc/%s/stat" % entry)
        if not stat:
            continue
        fields = stat.rpartition(")")[2].split()
        # fields after the name: state ppid pgrp ...
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            members.append(int(entry))
    return members


def normalized_arch():
    machine = platform.machine().lower()
    return "aarch64" if machine in ("arm64", "aarch64", "armv8l") else machine


def emulator_path():
    """The emulator this process runs under, or None when it runs natively.

    qemu-user answers /proc/self/exe with the emulated program (it intercepts that one
    path), but /proc/self/task/<tid>/exe is the kernel's own answer: the qemu binary. On
    real hardware both name the same file."""
    try:
        claimed = os.readlink("/proc/self/exe")
        tids = os.listdir("/proc/self/task")
        actual = os.readlink("/proc/self/task/%s/exe" % tids[0])
    except (OSError, IndexError):
        return None
    if actual != claimed and "qemu" in os.path.basename(actual):
        return actual
    return None


def cpu_info():
    arch = normalized_arch()
    text = read_text("/proc/cpuinfo", "") or ""
    model, flags, parts = None, set(), set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key in ("model name", "Hardware", "Processor") and not model:
            model = value
        elif key in ("flags", "Features"):
            flags.update(value.split())
        elif key == "CPU part":
            parts.add(value)
    table = X86_FLAGS if arch == "x86_64" else ARM_FLAGS
    features = sorted(name for name, flag in table.items() if flag in flags)
    if not model and parts:
        model = "ARM CPU part " + ",".join(sorted(parts))
    return {"arch": arch, "model": model or platform.processor() or "unknown",
            "features": features, "cores": os.cpu_count() or 1,
            "online": read_text("/sys/devices/system/cpu/online"),
            "cpu_parts": sorted(parts), "emulator": emulator_path()}


def probe_module(module, timeout):
    """(ok, detail): can a fresh child `import module`? (a bad wheel may segfault)."""
    code = "import %s as m; print(getattr(m, '__version__', '?'))" % module
    try:
        proc = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, "import %s took over %d s" % (module, timeout)
    except OSError as exc:
        return False, "cannot start %s: %s" % (sys.executable, exc)
    if proc.returncode != 0:
        tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        why = tail[-1] if tail else "exit status %d" % proc.returncode
        if proc.returncode < 0:
            why = "killed by signal %d" % -proc.returncode
        return False, "import %s failed: %s" % (module, why)
    return True, proc.stdout.decode("utf-8", "replace").strip()


def route_table(workdir):
    """The routes deploy shipped (runners/routes.json, written from the host's route
    registry), or None when there is none."""
    try:
        with open(os.path.join(workdir, "runners", ROUTE_TABLE)) as handle:
            table = json.load(handle)
    except (OSError, ValueError):
        return None
    routes = table.get("routes") if isinstance(table, dict) else None
    return routes if isinstance(routes, dict) else None


def _executable(path):
    return os.path.isfile(path) and os.access(path, os.X_OK)


def route_capability(workdir, arch, features, entry, probed):
    """One route's verdict from its table entry (see farm.routes.spec.Route.agent)."""
    def local(rel):
        return os.path.join(workdir, rel.replace("{arch}", arch))

    missing = [f for f in (entry.get("cpu_features") or {}).get(arch, ()) if f not in features]
    if missing:
        return {"ok": False, "reason": "CPU lacks %s needed by this route on %s"
                % (", ".join(missing), arch)}
    candidates = [local(r) for r in entry.get("runners") or ()]
    runner = None
    for path in candidates:  # a python runner, else an executable
        if (path.endswith(".py") and os.path.isfile(path)) or _executable(path):
            runner = path
            break
    if runner is None:
        return {"ok": False, "reason": "runner %s not deployed" % " or ".join(candidates)}
    for need in entry.get("requires") or ():
        if not _executable(local(need)):
            return {"ok": False, "reason": "%s not deployed for %s" % (local(need), arch)}
    found = {"ok": True, "reason": "", "runner": os.path.relpath(runner, workdir)}
    for module in entry.get("modules") or ():
        ok, detail = probed[module]
        if not ok:
            return {"ok": False, "reason": detail}
        found.setdefault("version", detail)
    return found


def route_capabilities(workdir, cpu, probe_timeout):
    """Which routes can run here, with the runner path and the reason when not: the routes
    of the table deploy shipped, each after the checks its entry names."""
    table = route_table(workdir) or {}
    modules = sorted(set(m for e in table.values() for m in (e.get("modules") or ())))
    probed = {}

    def probe(module):
        probed[module] = probe_module(module, probe_timeout)

    threads = [threading.Thread(target=probe, args=(m,)) for m in modules]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return dict((name, route_capability(workdir, cpu["arch"], cpu["features"], entry, probed))
                for name, entry in table.items())


def cpuinfo_khz():
    """{"cpuN": kHz} from /proc/cpuinfo's "cpu MHz" lines (x86 kernels print them)."""
    out, cpu = {}, None
    for line in (read_text("/proc/cpuinfo", "") or "").splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "processor" and value.strip().isdigit():
            cpu = "cpu" + value.strip()
        elif key == "cpu MHz" and cpu is not None:
            try:
                out[cpu] = int(float(value) * 1000)
            except ValueError:
                pass
    return out


# /proc/stat's aggregate "cpu" line, in the kernel's order (clock ticks since boot)
CPU_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def cpu_jiffies():
    """The whole machine's CPU time by kind, from /proc/stat; the host turns two readings
    into the share the hypervisor stole (`steal`) and the share that was busy: a VM whose
    host is oversubscribed loses time no load average shows."""
    for line in (read_text("/proc/stat", "") or "").splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            values = [int(v) for v in parts[1:1 + len(CPU_STAT_FIELDS)] if v.isdigit()]
            return dict(zip(CPU_STAT_FIELDS, values))
    return {}


def read_state(workdir):
    """Device state: the shape `farm.results.stats.drift_flags` compares before/after."""
    governors, freqs = {}, {}
    for path in sorted(glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq")):
        cpu = os.path.basename(os.path.dirname(path))
        gov = read_text(os.path.join(path, "scaling_governor"))
        if gov:
            governors[cpu] = gov
        cur = read_text(os.path.join(path, "scaling_cur_freq"))
        if cur and cur.isdigit():
            freqs[cpu] = int(cur)
    if not freqs:  # no cpufreq (a VM, a container): the kernel's own "cpu MHz" per CPU
        freqs = cpuinfo_khz()
    thermal, thermal_type = {}, {}
    for zone in sorted(glob.glob("/sys/class/thermal/thermal_zone*")):
        name = os.path.basename(zone)
        temp = read_text(os.path.join(zone, "temp"))
        try:
            thermal[name] = int(temp) / 1000.0
        except (TypeError, ValueError):
            continue
        thermal_type[name] = read_text(os.path.join(zone, "type")) or ""
    mem = {}
    for line in (read_text("/proc/meminfo", "") or "").splitlines():
        key, _, value = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            mem[key] = int(value.split()[0])
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    try:
        stat = os.statvfs(workdir)
        disk_free_kb = stat.f_bavail * stat.f_frsize // 1024
    except OSError:
        disk_free_kb = None
    uptime = read_text("/proc/uptime")
    return {"t_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "governor": governors, "freq_khz": freqs, "thermal_c": thermal,
            "thermal_type": thermal_type, "load": load,
            "mem_total_kb": mem.get("MemTotal"), "mem_available_kb": mem.get("MemAvailable"),
            "disk_free_kb": disk_free_kb, "cpu_jiffies": cpu_jiffies(),
            "uptime_s": float(uptime.split()[0]) if uptime else None}


# ----------------------------------------------------------------------------- children
# runner event -> fields that must be numbers (the host relies on them; same table as
# RUNNER_EVENTS in farm/protocol/wire.py). Unknown events are relayed as they are.
_NUMBER_FIELDS = {"loaded": ("load_ms",), "first": ("ms",), "warmup": ("runs", "ms_total")}


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def runner_event_problem(obj):
    """None when a runner event is well-formed enough to relay, else what is wrong."""
    name = obj["ev"]
    for key in _NUMBER_FIELDS.get(name, ()):
        if not _is_number(obj.get(key)):
            return "event %s: field %s must be a number, got %r" % (name, key, obj.get(key))
    if name == "samples":
        ms = obj.get("ms")
        if not isinstance(ms, list) or not all(_is_number(x) for x in ms):
            return "event samples: ms must be a list of numbers"
    if name == "outputs" and not isinstance(obj.get("file"), str):
        return "event outputs: file must be a path"
    if name == "ops" and not isinstance(obj.get("categories"), dict):
        return "event ops: categories must be an object"
    if name == "memory" and obj.get("vmhwm_kb") is not None and \
            not isinstance(obj.get("vmhwm_kb"), int):
        return "event memory: vmhwm_kb must be an integer"
    if name == "error" and not isinstance(obj.get("message"), str):
        return "event error: message must be a string"
    return None


def _load_prctl():
    """libc's prctl, resolved in the agent: the forked child must not import anything
    (another thread may hold the import lock at fork time)."""
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl
    except Exception:  # best effort; the lock file lists the child for reaping anyway
        return None


_PRCTL = _load_prctl()


def _child_setup():
    """In the runner child: own process group, and die with the agent (PR_SET_PDEATHSIG)."""
    os.setsid()
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG


class RouteRun(object):
    """One runner child: spawned, relayed, timed out or cancelled, then one `end` line.

    The thread that spawns the child also waits for it: PR_SET_PDEATHSIG fires when the
    forking *thread* exits, so it must outlive the child.
    """

    def __init__(self, agent, rid, argv, timeout_s):
        self.agent, self.rid, self.argv, self.timeout_s = agent, rid, argv, timeout_s
        self.proc = None
        self.reason = None  # "cancelled" | "timeout" | "protocol" once we killed it
        self.error_message = None
        self.saw_done = False
        self.stderr_tail = []
        self.thread = threading.Thread(target=self._main, name="run-" + rid)
        self.thread.daemon = True

    def start(self):
        self.thread.start()

    def kill(self, reason):
        if self.reason is None:
            self.reason = reason
        proc = self.proc
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass

    def _main(self):
        try:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         cwd=self.agent.workdir, preexec_fn=_child_setup)
        except OSError as exc:
            self._end("error", "cannot start runner %s: %s" % (self.argv[0], exc), None)
            return
        self.agent.note_child(self.proc.pid)
        timer = threading.Timer(self.timeout_s, self.kill, args=("timeout",))
        timer.daemon = True
        timer.start()
        errs = threading.Thread(target=self._pump_stderr)
        errs.daemon = True
        errs.start()
        try:
            self._pump_stdout()
            code = self.proc.wait()
            errs.join(2.0)
        finally:
            timer.cancel()
            self.agent.note_child(None)
        if self.reason == "timeout":
            self._end("timeout", "runner killed after %s s (timeout)" % self.timeout_s, code)
        elif self.reason == "cancelled":
            self._end("cancelled", "runner cancelled by the host", code)
        elif self.reason == "protocol":
            self._end("error", self.error_message, code)
        elif self.error_message is not None:
            self._end("error", self.error_message, code)
        elif code != 0:
            why = ("killed by signal %d" % -code) if code < 0 else ("exited %d" % code)
            self._end("error", "runner %s without reporting an error" % why, code)
        elif not self.saw_done:
            self._end("error", "runner exited 0 without a done event", code)
        else:
            self._end("done", "", code)

    def _pump_stdout(self):
        stream = self.proc.stdout
        while True:
            raw = stream.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                self.error_message = "runner printed a line over %d bytes: %r" % (
                    MAX_LINE_BYTES, raw[:80])
                self.kill("protocol")
                return
            text = raw.decode("utf-8", "replace").rstrip("\n")
            try:
                obj = json.loads(text)
            except ValueError:
                obj = None
            if not isinstance(obj, dict) or not isinstance(obj.get("ev"), str):
                if text.strip():  # a library printed to stdout: keep it for diagnostics
                    self.agent.out.send({"kind": "log", "id": self.rid, "text": text[:2000]})
                continue
            problem = runner_event_problem(obj)
            if problem:
                self.error_message = "runner broke the runner contract: %s" % problem
                self.kill("protocol")
                return
            if obj["ev"] == "error":
                self.error_message = str(obj.get("message", "runner error"))
            if obj["ev"] == "done":
                self.saw_done = True
            self.agent.out.send({"kind": "event", "id": self.rid, "ev": obj})

    def _pump_stderr(self):
        for raw in iter(self.proc.stderr.readline, b""):
            self.stderr_tail.append(raw.decode("utf-8", "replace"))
            del self.stderr_tail[:-40]

    def _end(self, status, message, code):
        try:
            os.unlink(self.argv[-1])  # the request file: nothing reads it any more
        except OSError:
            pass
        self.agent.run_finished(self)
        self.agent.out.send({"kind": "end", "id": self.rid, "status": status,
                             "message": message or "", "exit_code": code,
                             "stderr_tail": "".join(self.stderr_tail)[-4000:]})


# ----------------------------------------------------------------------------- agent
class Agent(object):
    def __init__(self, args):
        self.workdir = os.path.abspath(args.workdir)
        self.args = args
        self.out = Output(self.host_gone)
        self.run = None
        self.lock = threading.Lock()
        self.lock_fd = None
        self._touched = 0.0
        self.child_pid = None
        self.hashes = {}

    # -- device lock -------------------------------------------------------------------
    def lock_path(self):
        return lock_path(self.workdir)

    def take_lock(self):
        """True when this agent holds the device lock (reaping a stale holder if asked)."""
        fd = open_lock(self.workdir)
        for attempt in range(2):
            if try_lock(fd):
                self.lock_fd = fd
                previous = self.lock_info()
                self.write_lock_info()
                self.clean_start(previous)
                return True
            info = self.lock_info()
            if attempt == 0 and self.args.reap_stale and self.holder_is_stale(info):
                self.reap(info)
                continue
            os.close(fd)
            self.out.send({"kind": "error", "id": None, "message":
                           "device busy: another agent holds %s (%s)"
                           % (self.lock_path(), json.dumps(info, sort_keys=True))})
            return False
        return False

    def touch_lock(self):
        """Mark the lock as held by a live host session (at most once a second)."""
        now = time.time()
        if self.lock_fd is not None and now - self._touched >= 1.0:
            self._touched = now
            try:
                os.utime(self.lock_path(), None)
            except OSError:
                pass

    def holder_is_stale(self, info):
        """A holder is stale when its host has been silent for longer than the holder's own
        idle timeout (it is an orphan of a cut link and will not hear from its host again);
        a live bench of another host or state dir keeps its agent."""
        try:
            age = time.time() - os.stat(self.lock_path()).st_mtime
        except OSError:
            return True
        limit = info.get("idle_timeout")
        limit = float(limit) if isinstance(limit, (int, float)) else 60.0
        return age > limit + 2.0

    def lock_info(self):
        try:
            return json.loads(read_text(self.lock_path(), "{}") or "{}")
        except ValueError:
            return {}

    def write_lock_info(self):
        info = {"pid": os.getpid(), "holder": self.args.holder, "child": self.child_pid,
                "idle_timeout": self.args.idle_timeout,
                "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        data = json.dumps(info).encode()
        try:
            os.ftruncate(self.lock_fd, 0)
            os.pwrite(self.lock_fd, data, 0)
        except OSError as exc:  # a full disk: the flock still protects the device
            log("cannot write lock info: %s" % exc)

    def reap(self, info):
        """Kill a leftover agent (and its runner group) recorded in the lock file."""
        pid, child = info.get("pid"), info.get("child")
        log("reaping stale agent %s (holder %s)" % (pid, info.get("holder")))
        if isinstance(child, int) and child > 1:
            try:
                os.killpg(child, signal.SIGKILL)
            except OSError:
                pass
        if isinstance(pid, int) and pid > 1 and pid != os.getpid() and \
                "farm_agent" in (read_text("/proc/%d/cmdline" % pid, "") or ""):
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except OSError:
                    break
                for _ in range(50):
                    if not pid_running(pid):
                        break
                    time.sleep(0.05)
        time.sleep(0.05)

    def clean_start(self, previous):
        """Clear what an earlier agent left (we hold the lock, so it is gone): its lock
        entry, its runner's process group, its request files. Logged, never fatal."""
        pid, child = previous.get("pid"), previous.get("child")
        if isinstance(pid, int) and pid != os.getpid():
            state = "still running (reaped)" if pid_running(pid) else "dead"
            log("clean start: cleared the lock of agent pid %s (%s, holder %r, since %s)"
                % (pid, state, previous.get("holder"), previous.get("since")))
        if isinstance(child, int) and child > 1:
            # the group must still run something of this work dir: a recycled pid is left alone
            members = [m for m in group_members(child)
                       if self.workdir in (read_text("/proc/%d/cmdline" % m, "") or "")]
            if members:
                try:
                    os.killpg(child, signal.SIGKILL)
                    log("clean start: killed the leftover runner process group %d (%s)"
                        % (child, ", ".join(str(m) for m in members)))
                except OSError as exc:
                    log("clean start: cannot kill runner group %d: %s" % (child, exc))
        req_dir = os.path.join(self.workdir, "out", "requests")
        try:
            stale = sorted(os.listdir(req_dir))
        except OSError:
            stale = []
        removed = []
        for name in stale:
            try:
                os.unlink(os.path.join(req_dir, name))
                removed.append(name)
            except OSError as exc:
                log("clean start: cannot remove stale request %s: %s" % (name, exc))
        if removed:
            log("clean start: removed %d stale request file(s) from %s: %s"
                % (len(removed), req_dir, ", ".join(removed[:10])))

    def note_child(self, pid):
        self.child_pid = pid
        if self.lock_fd is not None:
            try:
                self.write_lock_info()
            except OSError:
                pass

    # -- life cycle ----------------------------------------------------------------------
    def shutdown(self):
        run = self.run
        if run is not None:
            run.kill("cancelled")
            if run.proc is not None:
                try:
                    run.proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass

    def host_gone(self):
        log("stdout closed: host gone, stopping")
        self.shutdown()
        os._exit(0)

    def run_finished(self, run):
        with self.lock:
            if self.run is run:
                self.run = None

    def hello(self):
        me = os.path.abspath(__file__)
        cpu = cpu_info()
        self.out.send({
            "kind": "hello", "agent_sha256": file_sha256(me), "pid": os.getpid(),
            "python": platform.python_version(), "executable": sys.executable,
            "platform": {"system": platform.system(), "release": platform.release(),
                         "machine": platform.machine(), "libc": " ".join(platform.libc_ver())},
            "cpu": cpu, "workdir": self.workdir,
            "routes": route_capabilities(self.workdir, cpu, self.args.probe_timeout)})

    def serve(self):
        reader = LineReader(0)
        lineno = 0
        while True:
            line, status = reader.read_line(self.args.idle_timeout)
            if status == "eof":
                log("stdin closed, exiting")
                return 0
            if status == "timeout":
                log("host silent for %s s (link down?), exiting" % self.args.idle_timeout)
                return 3
            lineno += 1
            self.touch_lock()
            if status == "oversize":
                self.out.send({"kind": "error", "id": None, "message":
                               "request line %d over %d bytes: %r"
                               % (lineno, MAX_LINE_BYTES, line)})
                continue
            if self.handle(line, lineno) == "bye":
                return 0

    def handle(self, line, lineno):
        try:
            req = json.loads(line.decode("utf-8"))
        except ValueError as exc:
            return self.refuse(None, "request line %d is not JSON (%s): %r"
                               % (lineno, exc.__class__.__name__, line[:80]))
        if not isinstance(req, dict):
            return self.refuse(None, "request line %d is not a JSON object: %r"
                               % (lineno, line[:80]))
        rid = req.get("id")
        rid = rid if isinstance(rid, str) else None
        proto = req.get("proto")
        if type(proto) is not int or proto != PROTO:  # true and 1.0 are not protocol 1
            return self.refuse(rid, "request proto %r is not spoken by this agent (protocol %d):"
                               " redeploy the agent that matches the host's farm"
                               % (proto, PROTO))
        op = req.get("op")
        if rid is None:
            return self.refuse(None, "request line %d has no string id" % lineno)
        if op == "ping":
            self.reply(rid, {"t": time.monotonic()})
        elif op == "state":
            self.reply(rid, read_state(self.workdir))
        elif op == "run_route":
            self.start_route(rid, req)
        elif op == "cancel":
            target, run = req.get("target"), self.run
            hit = run is not None and run.rid == target
            if hit:
                run.kill("cancelled")
            self.reply(rid, {"cancelled": hit})
        elif op == "bye":
            self.shutdown()
            self.reply(rid, {})
            return "bye"
        else:
            self.refuse(rid, "unknown op %r (known: ping, state, run_route, cancel, bye)" % op)
        return None

    def refuse(self, rid, message):
        self.out.send({"kind": "error", "id": rid, "message": message})

    def reply(self, rid, data):
        self.out.send({"kind": "reply", "id": rid, "ok": True, "data": data})

    def verify(self, expected):
        """None when every {relative path: sha256} matches, else what is wrong.

        Hashes are cached by (size, mtime) so a route repeated on a big model costs one
        hash; a file changed in place changes its mtime and is hashed again.
        """
        if not isinstance(expected, dict):
            return "run_route verify must be an object {path: sha256}"
        for rel, want in sorted(expected.items()):
            path = os.path.realpath(os.path.join(self.workdir, rel))
            if not path.startswith(os.path.realpath(self.workdir) + os.sep):
                return "verify path %r is outside the work dir" % rel
            try:
                st = os.stat(path)
                key = (path, st.st_size, st.st_mtime_ns)
                got = self.hashes.get(key) or file_sha256(path)
            except OSError as exc:
                return "artifact %s is missing or unreadable (%s): redeploy" % (path, exc)
            self.hashes[key] = got
            if got != want:
                return ("artifact %s is corrupted: sha256 %s, deployed as %s: redeploy "
                        "(`farm deploy`)" % (path, got[:12], str(want)[:12]))
        return None

    def start_route(self, rid, req):
        runner, request, timeout_s = req.get("runner"), req.get("request"), req.get("timeout_s")
        if not isinstance(runner, str) or not isinstance(request, dict) or \
                not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool):
            return self.refuse(rid, "run_route needs runner (str), request (object) and "
                               "timeout_s (number)")
        path = os.path.realpath(os.path.join(self.workdir, runner))
        if not path.startswith(os.path.realpath(self.workdir) + os.sep):
            return self.refuse(rid, "runner %r is outside the work dir %s" % (runner,
                                                                              self.workdir))
        if not os.path.isfile(path):
            return self.refuse(rid, "runner %s is not deployed (run `farm deploy`)" % path)
        problem = self.verify(req.get("verify") or {})
        if problem:
            return self.refuse(rid, problem)
        with self.lock:
            if self.run is not None:
                return self.refuse(rid, "busy: run %s is still going" % self.run.rid)
            req_dir = os.path.join(self.workdir, "out", "requests")
            dirs = [req_dir]
            if isinstance(request.get("outputs"), str):  # runners expect its directory
                dirs.append(os.path.dirname(os.path.join(self.workdir, request["outputs"])))
            try:
                for directory in dirs:
                    if directory and not os.path.isdir(directory):
                        os.makedirs(directory)
                req_file = os.path.join(req_dir, "%s-%d.json" % (rid.replace("/", "_"),
                                                                 os.getpid()))
                with open(req_file, "w") as handle:
                    json.dump(request, handle)
            except OSError as exc:
                return self.refuse(rid, "cannot write the request file in %s: %s"
                                   % (req_dir, exc))
            argv = [sys.executable, "-u", path] if path.endswith(".py") else [path]
            self.run = RouteRun(self, rid, argv + ["--request", req_file], float(timeout_s))
            self.run.start()
        return None


def parse_args(argv):
    parser = argparse.ArgumentParser(description="farm on-device agent (protocol %d)" % PROTO)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--holder", default="", help="who started us (shown to a waiter)")
    parser.add_argument("--reap-stale", action="store_true",
                        help="kill a leftover agent holding the device lock")
    parser.add_argument("--idle-timeout", type=float, default=60.0,
                        help="exit after this many seconds without a host line")
    parser.add_argument("--probe-timeout", type=float, default=60.0)
    once = parser.add_mutually_exclusive_group()
    once.add_argument("--probe", action="store_true",
                      help="print one JSON pre-flight probe and exit (`farm devices check`)")
    for mode, (metavar, text) in sorted(MODES.items()):
        once.add_argument("--" + mode, metavar=metavar,
                          help=text + "; print the outcome as JSON and exit")
    return parser.parse_args(argv)


def run_mode(mode, workdir, request):
    """One mode of MODES: its module's `run(workdir, request)`, answered as one JSON line."""
    module = importlib.import_module("agent_" + mode)
    sys.stdout.write(json.dumps(module.run(workdir, request)) + "\n")
    return 0


PROBE_WINDOW_S = 1.0  # steal and busy shares are read over this window


def probe(workdir):
    """The pre-flight probe: this Python, the CPU and the device state, nothing deployed;
    `state_before` is read PROBE_WINDOW_S earlier, so the host sees this second's steal."""
    existing = workdir
    while existing and not os.path.isdir(existing):  # the work dir may not exist yet
        existing = os.path.dirname(existing.rstrip("/")) or "/"
    before = read_state(existing or "/")
    time.sleep(PROBE_WINDOW_S)
    return {"probe": 1, "arch": normalized_arch(), "python": platform.python_version(),
            "python_path": sys.executable, "hostname": platform.node(),
            "kernel": platform.release(), "cpu": cpu_info(),
            "state": read_state(existing or "/"), "state_before": before,
            "disk_dir": existing}


def main(argv=None):
    args = parse_args(argv)
    for mode in MODES:
        request = getattr(args, mode)
        if request is not None:
            return run_mode(mode, args.workdir, json.loads(request))
    if args.probe:
        sys.stdout.write(json.dumps(probe(args.workdir)) + "\n")
        return 0
    agent = Agent(args)

    def on_signal(signum, frame):
        log("signal %d, stopping" % signum)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    try:
        try:
            if not os.path.isdir(agent.workdir):
                os.makedirs(agent.workdir)
            if not agent.take_lock():
                return 4
        except OSError as exc:  # e.g. a full or read-only work dir
            agent.out.send({"kind": "error", "id": None, "message":
                            "cannot take the device lock in %s: %s" % (agent.workdir, exc)})
            return 4
        agent.hello()
        return agent.serve()
    finally:
        agent.shutdown()


if __name__ == "__main__":
    sys.exit(main())
