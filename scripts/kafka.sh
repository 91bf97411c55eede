#!/usr/bin/env bash
# A local Apache Kafka 4.x (KRaft, no ZooKeeper) for development, tests and benchmarks,
# assembled from Maven Central jars and run with the machine's Java. No Docker needed.
#
#   scripts/kafka.sh start            one broker on 127.0.0.1:9092 (PLAINTEXT), :9094 (SASL/PLAIN)
#                                     and :9095 (TLS with client certificates; CA and certificates
#                                     generated once into .run/kafka/tls)
#   scripts/kafka.sh start --cluster  three brokers on 127.0.0.1:19092,19192,19292 (RF 3, min ISR 2)
#   scripts/kafka.sh start --fencing  one broker on 127.0.0.1:9192 that its own controller fences for
#                                     about 6 s of every 8 (it heartbeats every 8 s, the session lasts 2 s):
#                                     while fenced it answers metadata listing no broker (fault tests)
#   scripts/kafka.sh stop [--cluster|--fencing|--all]
#   scripts/kafka.sh status
#   scripts/kafka.sh topic NAME [PARTITIONS] [KEY=VALUE...] [--cluster|--fencing]  create if missing (with those settings), then describe
#   scripts/kafka.sh topic-placed NAME ASSIGNMENT --cluster  create with its replicas on given nodes
#                                     (Kafka's --replica-assignment: 2:3,3:2 = two partitions on nodes 2 and 3)
#   scripts/kafka.sh consume [TOPIC] [--cluster]             print key, partition, value from the start
#                                     with Kafka's own console consumer (KAFKA_BOOTSTRAP: another broker;
#                                     KAFKA_CONSUME_MAX: stop after that many messages)
#   scripts/kafka.sh topic-config NAME KEY=VALUE [--cluster]  change a topic setting (fault tests)
#   scripts/kafka.sh kill-node N | stop-node N | start-node N  cluster fault injection (kill -9 / stop / restart)
#   scripts/kafka.sh freeze-node N | thaw-node N   SIGSTOP / SIGCONT a broker (N = 1-3, or single): it keeps
#                                     its connections open and answers nothing, like a frozen VM
#   scripts/kafka.sh controller [--cluster]                   the node id of the active KRaft controller
#   scripts/kafka.sh fetch                                    only download the jars
#
# Everything is idempotent: a second `start` finds the broker running and says so.
# Jars live in .cache/kafka (KAFKA_CACHE), data, logs and pid files in .run/kafka (KAFKA_RUN).
# KAFKA_PORT (9092) moves the single broker: its controller, SASL and TLS listeners are the next three
# ports. With a KAFKA_RUN of its own it is a second local broker beside the first (make test-fast's shared lane).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${KAFKA_CACHE:-$ROOT/.cache/kafka}
RUN=${KAFKA_RUN:-$ROOT/.run/kafka}
LIB=$CACHE/lib
TOPIC_DEFAULT=${MQ_TOPIC:-container.telemetry}
PORT=${KAFKA_PORT:-9092}
PARTITIONS_DEFAULT=${KAFKA_PARTITIONS:-6}
HEAP=${KAFKA_HEAP:--Xms256m -Xmx768m}
# The brokers' collector and compiler flags. make test sets "-XX:+UseSerialGC -XX:TieredStopAtLevel=1":
# its brokers start often and carry little, and those flags halve the CPU of a start (scripts/test.sh).
BROKER_JVM=${KAFKA_BROKER_JVM:--XX:+UseG1GC}
# Credentials of the SASL/PLAIN listener of the single broker (tests of issue "broker security").
SASL_USER=${KAFKA_SASL_USER:-ingest}
SASL_PASSWORD=${KAFKA_SASL_PASSWORD:-ingest-secret}

# TLS material of the single broker's SSL listener (:9095): a local CA, a broker certificate for
# 127.0.0.1/localhost and a client certificate, generated once with openssl (tests of broker security).
TLS=$RUN/tls
TLS_PASSWORD=${KAFKA_TLS_PASSWORD:-ingest-tls}

say() { printf 'kafka.sh: %s\n' "$*"; }
die() { printf 'kafka.sh: %s\n' "$*" >&2; exit 1; }

# The Kafka version is scripts/kafka/pom.xml's; jars of another version in the cache are replaced.
KAFKA_VERSION=$(sed -n 's|.*<kafka.version>\(.*\)</kafka.version>.*|\1|p' "$ROOT/scripts/kafka/pom.xml")
fetch() {
  if [[ -f $LIB/kafka_2.13-$KAFKA_VERSION.jar && -f $LIB/kafka-tools-$KAFKA_VERSION.jar ]] \
     && compgen -G "$LIB/log4j-core-*.jar" >/dev/null; then
    return 0
  fi
  rm -rf "$LIB"
  command -v mvn >/dev/null || die "mvn not found: install Maven (apt-get install maven)"
  command -v java >/dev/null || die "java not found: install a JDK 17+ (apt-get install openjdk-17-jre-headless)"
  say "downloading Kafka $KAFKA_VERSION's jars from Maven Central into $LIB"
  mkdir -p "$LIB"
  mvn -B -q -f "$ROOT/scripts/kafka/pom.xml" \
    org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$LIB"
  [[ -f $LIB/kafka_2.13-$KAFKA_VERSION.jar ]] || die "Maven did not bring kafka_2.13 $KAFKA_VERSION into $LIB"
  say "jars ready ($(ls "$LIB" | wc -l) files)"
}

# Kafka's command-line tools live a second or two: the client compiler alone and the serial collector
# take about a third less CPU than the JVM's defaults (make test calls them beside busy brokers).
TOOL_JVM=(-XX:TieredStopAtLevel=1 -XX:+UseSerialGC)
java_run() { java "${TOOL_JVM[@]}" -cp "$LIB/*" -Dlog4j2.configurationFile="$RUN/log4j2.properties" "$@"; }

write_log4j() {
  mkdir -p "$RUN"
  cat >"$RUN/log4j2.properties" <<'EOF'
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
EOF
  # The command-line tools share the JVM classpath; keep them quiet.
  cat >"$RUN/tools-log4j2.properties" <<'EOF'
appender.console.type = Console
appender.console.name = STDERR
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %p %m%n
rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = STDERR
EOF
  # Short timeouts so that a tool aimed at a broker that is not up fails fast instead of waiting 60 s.
  printf 'request.timeout.ms=3000\ndefault.api.timeout.ms=5000\n' >"$RUN/tools.properties"
}

tool() { java "${TOOL_JVM[@]}" -cp "$LIB/*" -Dlog4j2.configurationFile="$RUN/tools-log4j2.properties" "$@"; }

# node_config NAME ID BROKER_PORT CONTROLLER_PORT VOTERS EXTRA...
node_config() {
  local name=$1 id=$2 bport=$3 cport=$4 voters=$5 extra=$6
  local dir=$RUN/$name
  mkdir -p "$dir/data"
  cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=$id
controller.quorum.voters=$voters
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data
num.network.threads=2
num.io.threads=2
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
log.retention.hours=24
log.segment.bytes=104857600
# A transaction past its timeout is aborted within a second of it, not ten: the fault tests freeze a
# worker holding one open, and wait for that abort.
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
$extra
EOF
}

# sign NAME SUBJECT [SUBJECT_ALT_NAME]: a key and a certificate signed by the local CA, both PEM.
sign() {
  local name=$1 subject=$2 san=${3:-}
  openssl req -newkey rsa:2048 -nodes -keyout "$TLS/$name.key" -out "$TLS/$name.csr" -subj "$subject" 2>"$TLS/openssl.log" \
    || { cat "$TLS/openssl.log" >&2; die "openssl could not create the $name key"; }
  openssl x509 -req -in "$TLS/$name.csr" -CA "$TLS/ca.pem" -CAkey "$TLS/ca.key" -CAcreateserial -days 3650 \
    -out "$TLS/$name.pem" ${san:+-extfile <(printf 'subjectAltName=%s' "$san")} 2>"$TLS/openssl.log" \
    || { cat "$TLS/openssl.log" >&2; die "openssl could not sign the $name certificate"; }
  rm -f "$TLS/$name.csr"
}

tls_material() {
  [[ -f $TLS/truststore.p12 ]] && return 0
  command -v openssl >/dev/null || die "openssl not found: install it (apt-get install openssl)"
  rm -rf "$TLS"; mkdir -p "$TLS"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$TLS/ca.key" -out "$TLS/ca.pem" -days 3650 \
    -subj "/CN=track-ingest local CA" 2>"$TLS/openssl.log" || { cat "$TLS/openssl.log" >&2; die "openssl could not create the CA"; }
  sign broker "/CN=localhost" "IP:127.0.0.1,DNS:localhost"
  sign client "/CN=track-ingest"
  openssl pkcs12 -export -in "$TLS/broker.pem" -inkey "$TLS/broker.key" -certfile "$TLS/ca.pem" -name broker \
    -out "$TLS/broker.p12" -passout "pass:$TLS_PASSWORD" || die "openssl could not write the broker keystore"
  keytool -importcert -noprompt -alias ca -file "$TLS/ca.pem" -keystore "$TLS/truststore.p12.tmp" \
    -storetype PKCS12 -storepass "$TLS_PASSWORD" >"$TLS/keytool.log" 2>&1 \
    || { cat "$TLS/keytool.log" >&2; die "keytool could not write the truststore"; }
  rm -f "$TLS/openssl.log" "$TLS/keytool.log"
  mv "$TLS/truststore.p12.tmp" "$TLS/truststore.p12"
  say "TLS material generated in $TLS (ca.pem, client.pem, client.key)"
}

# replication RF MIN_ISR: the replication settings of a node's topics, internal ones included.
replication() {
  printf '%s\n' "offsets.topic.replication.factor=$1" "transaction.state.log.replication.factor=$1" \
    "transaction.state.log.min.isr=$2" "share.coordinator.state.topic.replication.factor=$1" \
    "share.coordinator.state.topic.min.isr=$2" "default.replication.factor=$1" "min.insync.replicas=$2"
}

single_config() {
  tls_material
  node_config single 1 "$PORT" $((PORT + 1)) "1@127.0.0.1:$((PORT + 1))" "listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$((PORT + 1)),SASL_PLAINTEXT://127.0.0.1:$((PORT + 2)),SSL://127.0.0.1:$((PORT + 3))
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT,SASL_PLAINTEXT://127.0.0.1:$((PORT + 2)),SSL://127.0.0.1:$((PORT + 3))
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL
ssl.keystore.type=PKCS12
ssl.keystore.location=$TLS/broker.p12
ssl.keystore.password=$TLS_PASSWORD
ssl.key.password=$TLS_PASSWORD
ssl.truststore.type=PKCS12
ssl.truststore.location=$TLS/truststore.p12
ssl.truststore.password=$TLS_PASSWORD
ssl.client.auth=required
sasl.enabled.mechanisms=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"$SASL_USER\" password=\"$SASL_PASSWORD\" user_$SASL_USER=\"$SASL_PASSWORD\";
$(replication 1 1)"
}

# node_port N [2|3]: cluster node N's broker port (19092, 19192, 19292), or with 3 its controller's.
# All below Linux's ephemeral range (32768-60999), where an outgoing connection can hold a port (node
# 3 was on 39092 until the fencing broker, on 49092, could not bind in CI for that reason).
node_port() { echo $((19090 + ($1 - 1) * 100 + ${2:-2})); }

cluster_config() {
  local voters="1@127.0.0.1:$(node_port 1 3),2@127.0.0.1:$(node_port 2 3),3@127.0.0.1:$(node_port 3 3)" i
  for i in 1 2 3; do
    node_config "node$i" "$i" "$(node_port "$i")" "$(node_port "$i" 3)" "$voters" "listeners=PLAINTEXT://127.0.0.1:$(node_port "$i"),CONTROLLER://127.0.0.1:$(node_port "$i" 3)
advertised.listeners=PLAINTEXT://127.0.0.1:$(node_port "$i")
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
$(replication 3 2)
broker.session.timeout.ms=4000
broker.heartbeat.interval.ms=1000
leader.imbalance.check.interval.seconds=10"
  done
}

# A broker whose heartbeat interval (8 s) outlasts its session (2 s): the controller fences it 2 s after
# each heartbeat and the next one unfences it. Kafka only logs an error for that setting. Fenced, the
# broker leads no partition and leaves itself out of its metadata answers, which then list no broker:
# what a lone broker cut off from its controller quorum, or any KRaft broker in the moment after a
# long pause, answers. Its ports are below Linux's ephemeral range (32768-60999), where any outgoing
# connection can hold them (49092 was taken so once, in CI, while other tests ran).
FENCING_PORT=9192
fencing_config() {
  local cport=$((FENCING_PORT + 1))
  node_config fencing 1 "$FENCING_PORT" "$cport" "1@127.0.0.1:$cport" "listeners=PLAINTEXT://127.0.0.1:$FENCING_PORT,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$FENCING_PORT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
$(replication 1 1)
broker.session.timeout.ms=2000
broker.heartbeat.interval.ms=8000"
}

pid_of() { local f=$RUN/$1/pid; [[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null && cat "$f"; return 0; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

format_node() {
  local name=$1 cid=$2
  [[ -f $RUN/$name/data/meta.properties ]] && return 0
  java_run kafka.tools.StorageTool format -t "$cid" -c "$RUN/$name/server.properties" >"$RUN/$name/format.log" 2>&1 \
    || { cat "$RUN/$name/format.log" >&2; die "formatting $name failed"; }
}

launch_node() {
  local name=$1 port=$2
  if [[ -n $(pid_of "$name") ]]; then say "$name already running (pid $(pid_of "$name"))"; return 0; fi
  port_open "$port" && die "port $port is taken by another process; stop it or set MQ_BROKERS to that broker"
  # setsid: the broker must not receive the Ctrl-C meant for a foreground `make run`.
  setsid java $HEAP $BROKER_JVM -Djava.awt.headless=true -Dlog4j2.configurationFile="$RUN/log4j2.properties" \
    -cp "$LIB/*" kafka.Kafka "$RUN/$name/server.properties" >>"$RUN/$name/broker.log" 2>&1 </dev/null &
  echo $! >"$RUN/$name/pid"
}

# Waits until a broker really answers a metadata request (a topic listing), not just a port. The
# listing (a JVM of its own) is tried only once the port is open.
wait_ready() {
  local bootstrap=$1 name=$2 deadline=$((SECONDS + ${KAFKA_START_TIMEOUT:-120}))
  while ((SECONDS < deadline)); do
    if [[ -z $(pid_of "$name") ]]; then tail -n 30 "$RUN/$name/broker.log" >&2; die "$name exited during start-up (log: $RUN/$name/broker.log)"; fi
    if ! port_open "${bootstrap##*:}"; then sleep 0.2; continue; fi
    if tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" --command-config "$RUN/tools.properties" --list >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.5
  done
  die "broker at $bootstrap did not answer a metadata request within ${KAFKA_START_TIMEOUT:-120} s (log: $RUN/$name/broker.log)"
}

# create_topic BOOTSTRAP NAME PARTITIONS RF [CONFIG=VALUE ...]
create_topic() {
  local out tries=0 configs=()
  for c in "${@:5}"; do configs+=(--config "$c"); done
  until out=$(tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$1" --command-config "$RUN/tools.properties" \
      --create --if-not-exists --topic "$2" --partitions "$3" --replication-factor "$4" "${configs[@]}" 2>&1); do
    # In a cluster, RF 3 needs all three brokers registered; they come up a moment apart.
    ((++tries < 30)) || { echo "$out" >&2; die "could not create topic $2"; }
    sleep 1
  done
}

describe_topic() {
  local out tries=0
  until out=$(tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$1" --command-config "$RUN/tools.properties" \
      --describe --topic "$2" 2>&1); do
    # The fencing broker answers no admin call while its controller fences it (about 6 s of every 8).
    ((++tries < 30)) || { echo "$out" >&2; die "could not describe topic $2"; }
    sleep 1
  done
  echo "$out"
}

cluster_id() {
  local f=$RUN/$1.cluster-id
  [[ -f $f ]] || java_run kafka.tools.StorageTool random-uuid >"$f"
  cat "$f"
}

start_single() {
  local t0=$SECONDS
  fetch; write_log4j
  if [[ -n $(pid_of single) ]]; then say "broker already running on 127.0.0.1:$PORT (pid $(pid_of single))"; return 0; fi
  single_config
  format_node single "$(cluster_id single)"
  launch_node single "$PORT"
  wait_ready "127.0.0.1:$PORT" single
  create_topic "127.0.0.1:$PORT" "$TOPIC_DEFAULT" "$PARTITIONS_DEFAULT" 1
  say "broker ready on 127.0.0.1:$PORT (SASL/PLAIN on :$((PORT + 2)), TLS on :$((PORT + 3))) with topic $TOPIC_DEFAULT ($PARTITIONS_DEFAULT partitions) in $((SECONDS - t0)) s"
}

start_cluster() {
  local t0=$SECONDS cid i
  fetch; write_log4j
  cluster_config
  cid=$(cluster_id cluster)
  for i in 1 2 3; do format_node "node$i" "$cid"; done
  for i in 1 2 3; do launch_node "node$i" "$(node_port "$i")"; done
  wait_ready 127.0.0.1:19092 node1
  create_topic "$CLUSTER_BOOTSTRAP" "$TOPIC_DEFAULT" "$PARTITIONS_DEFAULT" 3
  say "3-broker cluster ready on $CLUSTER_BOOTSTRAP with topic $TOPIC_DEFAULT ($PARTITIONS_DEFAULT partitions, RF 3, min ISR 2) in $((SECONDS - t0)) s"
}
CLUSTER_BOOTSTRAP=127.0.0.1:19092,127.0.0.1:19192,127.0.0.1:19292

start_fencing() {
  local t0=$SECONDS
  fetch; write_log4j
  if [[ -n $(pid_of fencing) ]]; then say "fencing broker already running on 127.0.0.1:$FENCING_PORT (pid $(pid_of fencing))"; return 0; fi
  fencing_config
  format_node fencing "$(cluster_id fencing)"
  launch_node fencing "$FENCING_PORT"
  wait_ready "127.0.0.1:$FENCING_PORT" fencing
  say "fencing broker ready on 127.0.0.1:$FENCING_PORT (fenced by its controller about 6 s of every 8) in $((SECONDS - t0)) s"
}

stop_node() {
  local name=$1 pid sig=${2:-TERM} i
  pid=$(pid_of "$name")
  [[ -z $pid ]] && { rm -f "$RUN/$name/pid"; return 0; }
  kill "-$sig" "$pid" 2>/dev/null || true
  for i in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; sleep 0.5; fi
  rm -f "$RUN/$name/pid"
  say "stopped $name (pid $pid)"
}

stop_all_of() {
  local n
  # Stop cluster nodes in parallel: a controller quorum that loses members one by one stalls shutdown.
  for n in "$@"; do stop_node "$n" & done
  wait
}

status() {
  local n any=0
  for n in single node1 node2 node3 fencing; do
    if [[ -n $(pid_of "$n") ]]; then say "$n running (pid $(pid_of "$n"))"; any=1; fi
  done
  ((any)) || say "no broker running"
  return 0
}

cmd=${1:-help}; shift || true
cluster=0; fencing=0; all=0
args=()
for a in "$@"; do
  case $a in --cluster) cluster=1 ;; --fencing) fencing=1 ;; --all) all=1 ;; *) args+=("$a") ;; esac
done
bootstrap() { if ((cluster)); then echo "$CLUSTER_BOOTSTRAP"; elif ((fencing)); then echo "127.0.0.1:$FENCING_PORT"; else echo "127.0.0.1:$PORT"; fi; }

case $cmd in
  fetch) fetch ;;
  start) if ((cluster)); then start_cluster; elif ((fencing)); then start_fencing; else start_single; fi ;;
  stop)
    if ((all)); then stop_all_of single node1 node2 node3 fencing
    elif ((cluster)); then stop_all_of node1 node2 node3
    elif ((fencing)); then stop_all_of fencing
    else stop_all_of single; fi
    say "stopped" ;;
  status) status ;;
  topic)
    fetch; write_log4j
    name=${args[0]:-$TOPIC_DEFAULT}; parts=${args[1]:-$PARTITIONS_DEFAULT}
    create_topic "$(bootstrap)" "$name" "$parts" "$( ((cluster)) && echo 3 || echo 1)" "${args[@]:2}"
    describe_topic "$(bootstrap)" "$name" ;;
  topic-placed)
    fetch; write_log4j
    tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$(bootstrap)" --command-config "$RUN/tools.properties" \
      --create --if-not-exists --topic "${args[0]:?topic name}" --replica-assignment "${args[1]:?replica assignment, e.g. 2:3,3:2}" >/dev/null
    describe_topic "$(bootstrap)" "${args[0]}" ;;
  consume)
    fetch; write_log4j
    # Reads from the beginning and stops after KAFKA_CONSUME_TIMEOUT_MS without a new message; the
    # console consumer reports that stop as an "ERROR ... TimeoutException", which is filtered out.
    max=()
    [[ -z ${KAFKA_CONSUME_MAX:-} ]] || max=(--max-messages "$KAFKA_CONSUME_MAX")
    java "${TOOL_JVM[@]}" -cp "$LIB/*" -Dlog4j2.configurationFile="$RUN/tools-log4j2.properties" \
      org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "${KAFKA_BOOTSTRAP:-$(bootstrap)}" \
      --topic "${args[0]:-$TOPIC_DEFAULT}" --from-beginning --timeout-ms "${KAFKA_CONSUME_TIMEOUT_MS:-5000}" "${max[@]}" \
      --formatter-property print.key=true --formatter-property print.partition=true --formatter-property print.timestamp=true \
      2> >(grep -v -e 'TimeoutException' -e 'Error processing message, terminating consumer' >&2) ;;
  topic-config)
    fetch; write_log4j
    tool org.apache.kafka.tools.ConfigCommand --bootstrap-server "$(bootstrap)" --entity-type topics \
      --entity-name "${args[0]:?topic name}" --alter --add-config "${args[1]:?KEY=VALUE}" ;;
  controller)
    # The node id of the active KRaft controller (the quorum's leader), as the cluster reports it.
    fetch; write_log4j
    tool org.apache.kafka.tools.MetadataQuorumCommand --bootstrap-server "$(bootstrap)" describe --status \
      | awk '/^LeaderId:/ {print $2}' ;;
  kill-node) stop_node "node${args[0]:?node number 1-3}" KILL ;;
  freeze-node|thaw-node)
    n=${args[0]:?node number 1-3 or single}; name=$([[ $n == single ]] && echo single || echo "node$n")
    pid=$(pid_of "$name"); [[ -n $pid ]] || die "$name is not running"
    if [[ $cmd == freeze-node ]]; then kill -STOP "$pid"; say "froze $name (pid $pid): connections open, nothing answered"
    else kill -CONT "$pid"; say "thawed $name (pid $pid)"; fi ;;
  stop-node) stop_node "node${args[0]:?node number 1-3}" TERM ;;
  start-node)
    n=${args[0]:?node number 1-3}; write_log4j
    launch_node "node$n" "$(node_port "$n")"; wait_ready "127.0.0.1:$(node_port "$n")" "node$n"; say "node$n back on 127.0.0.1:$(node_port "$n")" ;;
  help|-h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) die "unknown command '$cmd' (try: $0 help)" ;;
esac
