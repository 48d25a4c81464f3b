"""Pre-flight probe of a device (stdlib only, Python 3.8+): prints ONE JSON object.

Run by `farm devices check` as `python - < probe.py`, so nothing needs deploying first.
Reports what decides whether numbers measured there can be trusted: arch, Python,
free memory and disk, load, CPU governor and frequencies, thermal zones.
"""
import json
import os
import platform
import sys


def _read(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (OSError, ValueError):
        return None


def cpu_state():
    governors, freqs = {}, {}
    base = "/sys/devices/system/cpu"
    try:
        names = sorted(n for n in os.listdir(base) if n.startswith("cpu") and n[3:].isdigit())
    except OSError:
        names = []
    for name in names:
        gov = _read(os.path.join(base, name, "cpufreq", "scaling_governor"))
        cur = _read(os.path.join(base, name, "cpufreq", "scaling_cur_freq"))
        if gov is not None:
            governors[name] = gov
        if cur is not None and cur.isdigit():
            freqs[name] = int(cur)
    return governors, freqs


def thermal_state():
    zones = {}
    base = "/sys/class/thermal"
    try:
        names = sorted(n for n in os.listdir(base) if n.startswith("thermal_zone"))
    except OSError:
        names = []
    for name in names:
        kind = _read(os.path.join(base, name, "type")) or name
        temp = _read(os.path.join(base, name, "temp"))
        if temp is not None and temp.lstrip("-").isdigit():
            zones[kind + "/" + name] = int(temp) / 1000.0
    return zones


def meminfo():
    out = {}
    text = _read("/proc/meminfo") or ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            out[key] = int(value.split()[0])
    return out


def cpu_model():
    text = _read("/proc/cpuinfo") or ""
    model, flags = None, []
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Hardware", "CPU part") and model is None:
            model = value.strip()
        if key in ("flags", "Features") and not flags:
            flags = value.split()
    return model, flags


def probe(workdir):
    governors, freqs = cpu_state()
    model, flags = cpu_model()
    disk_dir = workdir if os.path.isdir(workdir) else os.path.dirname(workdir.rstrip("/")) or "/"
    try:
        stat = os.statvfs(disk_dir)
        disk_free_kb = stat.f_bavail * stat.f_frsize // 1024
    except OSError:
        disk_free_kb = None
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    return {
        "probe": 1,
        "arch": platform.machine(),
        "python": platform.python_version(),
        "python_path": sys.executable,
        "hostname": platform.node(),
        "kernel": platform.release(),
        "cpu_model": model,
        "cpu_flags": flags,
        "cores": os.cpu_count(),
        "mem_kb": meminfo(),
        "disk_free_kb": disk_free_kb,
        "disk_dir": disk_dir,
        "load": load,
        "governor": governors,
        "freq_khz": freqs,
        "thermal_c": thermal_state(),
    }


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else "/tmp"
    sys.stdout.write(json.dumps(probe(target)) + "\n")
