#!/usr/bin/env bash
# Runs a command with a Kafka broker: MQ_BROKERS when it is set, otherwise the local broker of
# scripts/kafka.sh, started first if it is not running and stopped afterwards if this script started it.
#   scripts/with-broker.sh COMMAND [ARGS...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
started_broker=0
if [[ -z ${MQ_BROKERS:-} ]]; then
  if ! scripts/kafka.sh status | grep -q 'single running'; then
    scripts/kafka.sh start
    started_broker=1
  else
    echo "with-broker.sh: using the local broker that is already running"
  fi
  export MQ_BROKERS=127.0.0.1:9092
fi
cleanup() {
  if ((started_broker)); then scripts/kafka.sh stop; fi
}
trap cleanup EXIT
# Ctrl-C reaches the command and this shell alike: let the command shut down gracefully, then clean up.
trap ':' INT
"$@"
