#!/usr/bin/env bash
# start-kafka.sh — run an Apache Kafka KRaft node (broker + controller) on loopback.
#
#   start-kafka.sh start <datadir> [port]   background: format on first use, start, wait
#                                           until the node serves metadata, print
#                                           127.0.0.1:<port> (a free port when none given)
#   start-kafka.sh stop <datadir>           SIGTERM (controlled shutdown), SIGKILL after 60 s
#   start-kafka.sh run <datadir> <port> [advertised-port]
#                                           foreground (`exec`s the JVM, so the script's
#                                           PID is the broker's: the test harness uses this)
#   start-kafka.sh ready <host:port> [seconds]
#                                           wait until a broker there answers a Metadata
#                                           request with at least one broker (default 120 s)
#   start-kafka.sh consume <host:port> <topic> <read_committed|read_uncommitted> [idle-seconds]
#                                           read the topic from the beginning with Apache
#                                           Kafka's own Java consumer (a reader independent
#                                           of librdkafka's), one line per record:
#                                           Partition:p<TAB>Offset:o<TAB>headers<TAB>key; ends
#                                           after idle-seconds (default 30) without a record
#
# The first start in <datadir> writes <datadir>/server.properties and formats
# <datadir>/data; a later start reuses both, so a node killed and started again keeps
# its topics, records and producer state (unlike tansu, which keeps nothing).
# Env (first start only; later starts reuse the written configuration):
#   KAFKA_NODE_ID          node.id (default 1)
#   KAFKA_CONTROLLER_PORT  the CONTROLLER listener's port (default: a free one)
#   KAFKA_VOTERS           controller.quorum.voters (default: this node alone)
#   KAFKA_CLUSTER_ID       cluster id, 22 characters of base64 (default a fixed one)
#   KAFKA_PROPERTIES       extra server.properties lines (they win over the defaults)
#   KAFKA_EXTRA_LISTENERS  more listeners, comma-separated, added to both `listeners`
#                          and `advertised.listeners` (e.g. SASL_SSL://127.0.0.1:9094)
#   KAFKA_FORMAT_ARGS      more arguments of `kafka-storage format`, one per line (e.g.
#                          --add-scram and SCRAM-SHA-512=[name=u,password=p])
# Env (every start):
#   KAFKA_HEAP             JVM heap flags (default -Xms128m -Xmx768m: three nodes fit
#                          a 2-core, 24 GB machine beside the tests)
#   KAFKA_DIR              the install (default: what scripts/install-kafka.sh prints)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
die() { echo "start-kafka: $*" >&2; exit 1; }
usage() { sed -n '3,20p' "$0" >&2; exit 2; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# ready HOST:PORT SECONDS: a Metadata v1 request for no topic (brokers only) until
# the answer lists a broker. python3 is already a requirement of the harness (tansu).
ready() {
  python3 - "$1" "$2" <<'PY'
import socket, struct, sys, time
host, port = sys.argv[1].rsplit(":", 1)
deadline = time.time() + float(sys.argv[2])
client = b"start-kafka"
# api_key 3 (Metadata), version 1, correlation 7, client id, topics = [] (brokers only)
body = struct.pack(">hhih", 3, 1, 7, len(client)) + client + struct.pack(">i", 0)
req = struct.pack(">i", len(body)) + body
while True:
    try:
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(req)
            head = s.recv(12, socket.MSG_WAITALL)
            if len(head) == 12:
                _, corr, brokers = struct.unpack(">iii", head)
                if corr == 7 and brokers > 0:
                    sys.exit(0)
    except OSError:
        pass
    if time.time() > deadline:
        sys.exit(f"start-kafka: no broker served metadata at {sys.argv[1]} within {sys.argv[2]} s")
    time.sleep(0.2)
PY
}

# configure DATADIR PORT ADVERTISED: write server.properties and format, once.
configure() {
  local datadir="$1" port="$2" advertised="$3" conf="$1/server.properties"
  [[ -f "$conf" ]] && return 0
  local node="${KAFKA_NODE_ID:-1}"
  local cport="${KAFKA_CONTROLLER_PORT:-$(free_port)}"
  local voters="${KAFKA_VOTERS:-$node@127.0.0.1:$cport}"
  mkdir -p "$datadir"
  cat >"$conf.tmp" <<EOF
# Written by scripts/start-kafka.sh on the first start in this directory.
process.roles=broker,controller
node.id=$node
controller.quorum.voters=$voters
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport${KAFKA_EXTRA_LISTENERS:+,$KAFKA_EXTRA_LISTENERS}
advertised.listeners=PLAINTEXT://127.0.0.1:$advertised${KAFKA_EXTRA_LISTENERS:+,$KAFKA_EXTRA_LISTENERS}
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT
log.dirs=$datadir/data
num.partitions=3
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# Tests write little: small segments and no fsync policy beyond the defaults.
log.segment.bytes=16777216
# No time-based deletion: a record's timestamp is the row's created_at, and fixtures
# carry fixed old ones; with the default 7-day retention the broker deletes such a
# partition at its next retention check (every 5 minutes) — seen as records missing
# in the middle of a test.
log.retention.ms=-1
EOF
  if [[ -n "${KAFKA_PROPERTIES:-}" ]]; then
    printf '%s\n' "$KAFKA_PROPERTIES" >>"$conf.tmp"
  fi
  cat >"$datadir/log4j2.xml" <<EOF
<Configuration status="warn">
  <Appenders>
    <File name="file" fileName="$datadir/server.log">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Root level="info"><AppenderRef ref="file"/></Root>
    <Logger name="org.apache.kafka.clients" level="warn"/>
    <Logger name="kafka.log" level="warn"/>
    <Logger name="org.apache.kafka.storage" level="warn"/>
  </Loggers>
</Configuration>
EOF
  local format_args=()
  if [[ -n "${KAFKA_FORMAT_ARGS:-}" ]]; then mapfile -t format_args <<<"$KAFKA_FORMAT_ARGS"; fi
  java -cp "$libs/*" -Dlog4j2.configurationFile="$datadir/log4j2.xml" kafka.tools.StorageTool format \
    -t "${KAFKA_CLUSTER_ID:-cGdvdXRib3gtdGVzdHMtMQ}" -c "$conf.tmp" "${format_args[@]}" >"$datadir/format.log" 2>&1 \
    || { cat "$datadir/format.log" >&2; die "formatting $datadir failed"; }
  mv "$conf.tmp" "$conf"
}

jvm() {
  local datadir="$1"
  # shellcheck disable=SC2086
  exec java ${KAFKA_HEAP:--Xms128m -Xmx768m} -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -Djava.awt.headless=true -Dlog4j2.configurationFile="$datadir/log4j2.xml" \
    -cp "$libs/*" kafka.Kafka "$datadir/server.properties"
}

# consume HOST:PORT TOPIC ISOLATION IDLE: kafka-console-consumer's class, headers only.
consume() {
  local libs
  libs="${KAFKA_DIR:-$("$here/install-kafka.sh")}/libs"
  [[ "$3" == read_committed || "$3" == read_uncommitted ]] || die "isolation must be read_committed or read_uncommitted, not '$3'"
  exec java -Xms64m -Xmx512m -cp "$libs/*" -Dlog4j2.level=warn \
    org.apache.kafka.tools.consumer.ConsoleConsumer \
    --bootstrap-server "$1" --topic "$2" --from-beginning \
    --isolation-level "$3" --timeout-ms "$(( ${4:-30} * 1000 ))" \
    --consumer-property "group.id=start-kafka-consume-$$" \
    --consumer-property enable.auto.commit=false \
    --property print.partition=true \
    --property print.offset=true --property print.headers=true \
    --property print.key=true --property print.value=false
}

cmd="${1:-}"; shift || true
case "$cmd" in
  ready) [[ $# -ge 1 ]] || usage; ready "$1" "${2:-120}"; exit ;;
  consume) [[ $# -ge 3 ]] || usage; consume "$@" ;;
  run|start|stop) ;;
  *) usage ;;
esac
[[ $# -ge 1 ]] || usage
datadir="$1"
if [[ "$cmd" == stop ]]; then
  pid="$(cat "$datadir/kafka.pid" 2>/dev/null)" || die "no $datadir/kafka.pid: nothing started there"
  kill -TERM "$pid" 2>/dev/null || exit 0
  for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || { rm -f "$datadir/kafka.pid"; exit 0; }; sleep 0.1; done
  echo "start-kafka: $pid still running 60 s after SIGTERM; killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$datadir/kafka.pid"
  exit 0
fi

libs="${KAFKA_DIR:-$("$here/install-kafka.sh")}/libs"
[[ -d "$libs" ]] || die "$libs not found: run scripts/install-kafka.sh"
if [[ "$cmd" == run ]]; then
  [[ $# -ge 2 ]] || usage
  port="$2"; advertised="${3:-$2}"
  [[ "$port" =~ ^[0-9]+$ ]] || die "invalid port '$port'"
  configure "$datadir" "$port" "$advertised"
  jvm "$datadir"
fi

# start: in the background, then wait for metadata.
if [[ -f "$datadir/server.properties" ]]; then
  port="$(sed -n 's#^listeners=PLAINTEXT://127.0.0.1:\([0-9]*\),.*#\1#p' "$datadir/server.properties")"
else
  port="${2:-$(free_port)}"
fi
configure "$datadir" "$port" "$port"
if pid="$(cat "$datadir/kafka.pid" 2>/dev/null)" && kill -0 "$pid" 2>/dev/null; then
  die "a node already runs from $datadir (pid $pid): start-kafka.sh stop $datadir"
fi
nohup "$0" run "$datadir" "$port" >"$datadir/stdout.log" 2>&1 </dev/null &
echo $! >"$datadir/kafka.pid"
if ! ready "127.0.0.1:$port" 120; then
  tail -20 "$datadir/server.log" >&2 2>/dev/null || true
  exit 1
fi
echo "127.0.0.1:$port"
