#!/usr/bin/env bash
# `make run`: the service in the foreground. Without MQ_BROKERS it starts the local Kafka broker
# (scripts/kafka.sh) and, on Ctrl-C, stops it again if this script was the one that started it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
started_broker=0
if [[ -z ${MQ_BROKERS:-} ]]; then
  if ! scripts/kafka.sh status | grep -q 'single running'; then
    scripts/kafka.sh start
    started_broker=1
  else
    echo "run.sh: using the local broker that is already running"
  fi
  export MQ_BROKERS=127.0.0.1:9092
fi
cleanup() {
  if ((started_broker)); then scripts/kafka.sh stop; fi
}
trap cleanup EXIT
echo "run.sh: service on ${LISTEN_ADDR:-:8080}, Kafka at $MQ_BROKERS, topic ${MQ_TOPIC:-container.telemetry} (Ctrl-C stops)"
# Not exec: the trap must run after the service exits. Ctrl-C reaches node and this shell alike;
# the shell waits for node's graceful shutdown, then stops the broker.
trap ':' INT
node dist/src/main.js
