#!/usr/bin/env bash
# start-tansu.sh <port> <datadir> [advertised-port] — run a single-node tansu Kafka broker in the foreground.
#
# Listens on 127.0.0.1:<port> and advertises 127.0.0.1:<port> (broker node id 111).
# `exec`s tansu, so the PID of this script is the broker's PID: the test harness can
# spawn it and kill it directly.
#
# STORAGE IS IN MEMORY ONLY. The pinned tansu build (see install-tansu.sh) has only the
# `dynostore` storage feature: memory:// and s3:// work; file://, sqlite:// and
# postgres:// are rejected at startup (UnsupportedStorageUrl / FeatureNotEnabled).
# memory:// is the only robust local option, so <datadir> is created and used as the
# broker's working directory, but topics and messages do NOT survive a restart.
#
# Behaviour worth knowing (measured with tansu 0.6.0):
#  - accepts connections ~10-20 ms after exec; prints "ready in 0ms" on stdout.
#  - SIGTERM/SIGINT: exits 0, immediately when idle, after ~5 s if clients are still
#    connected (graceful drain). Use SIGKILL if you do not want to wait; nothing to lose.
#  - if the port is taken, tansu itself panics and exits 0 (!), so this script checks
#    that the port is free first and exits 1 if it is not.
# Env: TANSU_BIN (use this binary instead of running install-tansu.sh),
#      TANSU_CLUSTER_ID (default pgoutbox), RUST_LOG (tansu log filter; default: errors).
# Security (checked with 0.6.0): TLS is unusable (`--cert` together with `--key` is
# rejected by its argument parser; `--cert` alone still serves plaintext), and
# `--authentication` offers SCRAM only, whose users can only be created through
# AlterUserScramCredentials by an already authenticated client — impossible with the
# memory storage. Tests put a TLS + SASL/SCRAM gate in front instead
# (tests/support/sasl_gate.rs) and advertise the gate's port.
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]]; then
  echo "usage: $0 <port> <datadir> [advertised-port]" >&2
  exit 2
fi
port="$1"
datadir="$2"
# Clients are told to connect to the advertised port; tests put a TCP proxy there to
# simulate outages without losing the (in-memory) broker state.
advertised="${3:-$port}"
if ! [[ "$port" =~ ^[0-9]+$ ]] || (( port < 1 || port > 65535 )); then
  echo "start-tansu: invalid port '$port'" >&2
  exit 2
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="${TANSU_BIN:-}"
if [[ -z "$bin" ]]; then
  bin="$("$here/install-tansu.sh")"
fi
[[ -x "$bin" ]] || { echo "start-tansu: $bin is not executable" >&2; exit 1; }

if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
  echo "start-tansu: 127.0.0.1:$port is already in use" >&2
  exit 1
fi

mkdir -p "$datadir"
cd "$datadir"

# Flags win over tansu's env vars (LISTENER_URL, ADVERTISED_LISTENER_URL,
# STORAGE_ENGINE, CLUSTER_ID), so a stray environment cannot redirect the broker.
exec "$bin" broker \
  --cluster-id "${TANSU_CLUSTER_ID:-pgoutbox}" \
  --listener-url "tcp://127.0.0.1:$port" \
  --advertised-listener-url "tcp://127.0.0.1:$advertised" \
  --storage-engine "memory://tansu/"
