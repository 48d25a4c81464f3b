#!/bin/bash
# Build the aarch64 sysroot of the lab's emulated devices (`farm lab up --aarch64 M`).
#
# Usage: scripts/make_sysroot.sh [SYSROOT]
#   SYSROOT defaults to $FARM_SYSROOT, then <repo>/.farm/sysroot-aarch64.
#   $PYTHON is the host Python whose pip downloads the wheels (default: the repo's .venv).
#
# What it makes (idempotent: an up-to-date sysroot is left alone; the marker file
# SYSROOT/.farm-sysroot holds the sha256 of this script, so editing the pins below rebuilds):
#   usr/bin/python3.11   Debian bookworm arm64 python3.11 and its dependency closure,
#                        resolved by an ISOLATED apt (own lists, cache and empty dpkg status;
#                        the host's dpkg is never touched: no `dpkg --add-architecture`)
#   opt/site             aarch64 wheels of numpy + onnxruntime (the ORT route)
#   opt/site-tvm         apache-tvm + apache-tvm-ffi, separate so the ORT route never pays for them
#   proc/cpuinfo         an ARM cpuinfo: qemu-user shows the guest the host's x86 one through
#                        QEMU_LD_PREFIX, and onnxruntime's cpuinfo code segfaults on that
# Downloads (~150 MB the first time) are cached in SYSROOT.cache/ and pip's own cache, so a
# rebuild after an edit is quick. The build goes to SYSROOT.partial and is renamed at the end:
# a crash never leaves a half sysroot that looks complete.
set -euo pipefail

NUMPY=numpy==2.4.6
ORT=onnxruntime==1.32.0
TVM=apache-tvm==0.27.0.post1
TVM_FFI=apache-tvm-ffi==0.1.14.post1
TVM_DEPS=(ml_dtypes==0.7.0 typing_extensions)
DEBS=(python3.11 libstdc++6 libgomp1)
PYVER=3.11
PLATFORM=manylinux_2_28_aarch64   # manylinux2014 alone finds no apache-tvm and an old ORT

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SR=${1:-${FARM_SYSROOT:-$REPO/.farm/sysroot-aarch64}}
SR=$(realpath -m "$SR")
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3
SPEC=$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)

if [ -f "$SR/.farm-sysroot" ] && [ "$(cat "$SR/.farm-sysroot")" = "$SPEC" ]; then
  echo "sysroot up to date: $SR"
  exit 0
fi
for tool in apt-get dpkg-deb qemu-aarch64; do
  command -v "$tool" >/dev/null || { echo "make_sysroot: $tool not found (apt-get install qemu-user)" >&2; exit 1; }
done

CACHE=$SR.cache
APT=$CACHE/apt
WORK=$SR.partial
echo "building aarch64 sysroot in $SR (cache $CACHE)"
mkdir -p "$APT/etc/sources.list.d" "$APT/state/lists/partial" "$APT/cache/archives/partial" "$APT/dpkg"
# only Debian's own sources: other repositories of the host have no arm64 packages
cp /etc/apt/sources.list.d/debian.sources "$APT/etc/sources.list.d/"
[ -f "$APT/dpkg/status" ] || : > "$APT/dpkg/status"
cat > "$APT/apt.conf" <<EOF
APT::Architecture "arm64";
APT::Architectures { "arm64"; };
Dir::Etc::SourceList "/dev/null";
Dir::Etc::SourceParts "$APT/etc/sources.list.d";
Dir::Etc::Preferences "/dev/null";
Dir::Etc::PreferencesParts "/dev/null";
Dir::State "$APT/state";
Dir::State::status "$APT/dpkg/status";
Dir::Cache "$APT/cache";
Dir::Cache::archives "$APT/cache/archives";
Debug::NoLocking "true";
APT::Install-Recommends "false";
EOF
export APT_CONFIG=$APT/apt.conf
apt-get -q -o=Dpkg::Use-Pty=0 update >"$CACHE/apt-update.log" 2>&1 \
  || { cat "$CACHE/apt-update.log" >&2; echo "make_sysroot: apt-get update failed" >&2; exit 1; }
apt-get -q -y --download-only install "${DEBS[@]}" >"$CACHE/apt-install.log" 2>&1 \
  || { cat "$CACHE/apt-install.log" >&2; echo "make_sysroot: apt download failed" >&2; exit 1; }
unset APT_CONFIG

rm -rf "$WORK"
mkdir -p "$WORK"
for deb in "$APT"/cache/archives/*.deb; do dpkg-deb -x "$deb" "$WORK"; done

mkdir -p "$WORK/proc"
for ((c = 0; c < $(nproc); c++)); do
  printf 'processor\t: %d\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x4\nCPU part\t: 0xd0b\nCPU revision\t: 1\n\n' "$c"
done > "$WORK/proc/cpuinfo"

# the HOST pip downloads aarch64 wheels into target dirs; nothing is installed on the host
PIP=("$PYTHON" -m pip install -q --disable-pip-version-check --only-binary=:all:
     --platform "$PLATFORM" --python-version "$PYVER" --implementation cp)
"${PIP[@]}" --target "$WORK/opt/site" "$NUMPY" "$ORT"
# --no-deps: numpy comes from opt/site, so the two dirs never hold two numpys
"${PIP[@]}" --no-deps --target "$WORK/opt/site-tvm" "$TVM" "$TVM_FFI" "${TVM_DEPS[@]}"

echo "smoke test under qemu-aarch64 (imports numpy and onnxruntime, ~5 s)"
QEMU_LD_PREFIX=$WORK QEMU_CPU=cortex-a76 PYTHONPATH=$WORK/opt/site \
  qemu-aarch64 "$WORK/usr/bin/python$PYVER" -c \
  'import platform, numpy, onnxruntime; assert platform.machine() == "aarch64"; print("aarch64 python ok: numpy", numpy.__version__, "onnxruntime", onnxruntime.__version__)'

echo "$SPEC" > "$WORK/.farm-sysroot"
rm -rf "$SR"
mv -T "$WORK" "$SR"
for d in "$SR" "$SR/opt/site" "$SR/opt/site-tvm"; do du -sh "$d" | sed "s/^/  /"; done
echo "sysroot ready: $SR"
