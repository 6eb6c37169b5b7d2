#!/usr/bin/env bash
# install-kafka.sh — install a pinned Apache Kafka (broker + tools) for the tests.
#
# What: the jars of Apache Kafka 4.1.1 (`org.apache.kafka:kafka_2.13`, the broker, and
#   `kafka-tools`, the admin commands), with log4j2 as the logging binding (and
#   slf4j-api 2.x, which that binding needs), fetched
#   from Maven Central by `mvn dependency:copy-dependencies` into a cache outside the
#   clone. No Kafka tarball: Maven Central is the registry these machines reach.
# Why 4.1.1: a patch release of a 4.x line (KRaft only, Java 17 for the broker, the
#   `StandardAuthorizer`, transactions v2) that resolves here with all of its
#   dependencies and runs on Debian 12's OpenJDK 17. Bump KAFKA_VERSION together
#   with the sums (`scripts/install-kafka.sh --print-sums > scripts/kafka/jars.sha256`
#   after checking the new set by hand).
# Pins: every jar Maven brings must be listed in scripts/kafka/jars.sha256 with its
#   SHA-256, and every listed jar must be there. Maven's own checksum policy only
#   warns on a mismatch, so this script is what refuses a changed or extra jar.
#
# Usage: scripts/install-kafka.sh               -> prints the install directory (its
#                                                 libs/ holds the classpath) on stdout.
#        scripts/install-kafka.sh --print-sums  -> resolve without checking, print the
#                                                 sums file for the resolved jars.
# Env:   KAFKA_DIR  install directory (default $HOME/.cache/pgoutbox/kafka-$KAFKA_VERSION)
# Needs: java (17+) and mvn; as root on Debian they are installed when missing
#        (openjdk-17-jre-headless, maven).
# Idempotent: an existing install is re-checked against the sums (a fraction of a
# second) and only its directory printed.
set -euo pipefail

KAFKA_VERSION=4.1.1
LOG4J_VERSION=2.25.3
SLF4J_VERSION=2.0.17

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
sums="$here/kafka/jars.sha256"
dir="${KAFKA_DIR:-$HOME/.cache/pgoutbox/kafka-$KAFKA_VERSION}"

log() { echo "install-kafka: $*" >&2; }
die() { echo "install-kafka: ERROR: $*" >&2; exit 1; }

# check DIR: every jar in DIR/libs has its pinned sum, and no pinned jar is missing.
check() {
  local libs="$1/libs" bad=0
  [[ -d "$libs" ]] || return 1
  local want got
  want="$(sort -k2 "$sums")"
  got="$(cd "$libs" && sha256sum -- *.jar | awk '{print $1"  "$2}' | sort -k2)"
  if [[ "$want" != "$got" ]]; then
    diff <(echo "$want") <(echo "$got") | sed 's/^/install-kafka:   /' >&2 || true
    bad=1
  fi
  return "$bad"
}

print_sums=false
[[ "${1:-}" == --print-sums ]] && print_sums=true

if ! $print_sums && check "$dir" 2>/dev/null; then
  echo "$dir"
  exit 0
fi

need() { command -v "$1" >/dev/null 2>&1; }
if ! need java || ! need mvn; then
  if [[ $(id -u) -eq 0 ]] && need apt-get; then
    log "installing Java 17 and Maven from Debian (openjdk-17-jre-headless, maven)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq openjdk-17-jre-headless maven >/dev/null
  fi
  need java || die "java not found: install a Java 17 runtime (Debian: apt-get install openjdk-17-jre-headless)"
  need mvn || die "mvn not found: install Maven (Debian: apt-get install maven)"
fi

mkdir -p "$(dirname "$dir")"
tmp="$(mktemp -d "$(dirname "$dir")/.kafka-install.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>pgoutbox.test</groupId>
  <artifactId>apache-kafka</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>$LOG4J_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId><version>$LOG4J_VERSION</version></dependency>
    <!-- Kafka's pom names slf4j-api 1.7, which finds no 2.x binding: the broker would log nothing. -->
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>$SLF4J_VERSION</version></dependency>
  </dependencies>
</project>
EOF
log "resolving org.apache.kafka:kafka_2.13:$KAFKA_VERSION and kafka-tools with Maven"
(cd "$tmp" && mvn -B -q -ntp dependency:copy-dependencies \
   -DincludeScope=runtime -DoutputDirectory="$tmp/libs" >&2) \
  || die "mvn could not resolve Apache Kafka $KAFKA_VERSION (is Maven Central reachable?)"

if $print_sums; then
  (cd "$tmp/libs" && sha256sum -- *.jar | awk '{print $1"  "$2}' | sort -k2)
  exit 0
fi
check "$tmp" || die "the resolved jars differ from $sums (lines with < are pinned, > resolved); refusing to install"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
log "installed Apache Kafka $KAFKA_VERSION ($(ls "$dir/libs" | wc -l) jars) at $dir"
echo "$dir"
