#!/usr/bin/env bash
# `make run`: the service in the foreground, against MQ_BROKERS or the local broker (see with-broker.sh).
# On the local broker, MQ_REFUSED_TOPIC (when set) is created first, like the points' topic, and with
# DELIVERY=exactly-once the compacted positions topic.
# MQ_VALUE_FORMAT avro, protobuf or json-schema without SCHEMA_REGISTRY_URL: a local Schema Registry
# (scripts/registry.sh) is started first, as the broker is.
# Ctrl-C: the service drains and flushes, then the broker and the registry are stopped if they were
# started for this run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUN_ON_LOCAL_BROKER=$([[ -z ${MQ_BROKERS:-} ]] && echo 1 || echo 0)
export RUN_ON_LOCAL_BROKER
started_registry=0
if [[ ${MQ_VALUE_FORMAT:-json} != json && -z ${SCHEMA_REGISTRY_URL:-} ]]; then
  if ! scripts/registry.sh status | grep -q '^registry.sh: running on'; then
    scripts/registry.sh start
    started_registry=1
  fi
  SCHEMA_REGISTRY_URL=$(scripts/registry.sh url)
  export SCHEMA_REGISTRY_URL
  echo "run.sh: MQ_VALUE_FORMAT=$MQ_VALUE_FORMAT, schema registered at $SCHEMA_REGISTRY_URL (make consume decodes the values)"
fi
stop_registry() { if ((started_registry)); then scripts/registry.sh stop; fi; }
trap stop_registry EXIT
# Ctrl-C reaches the service and this shell alike: let the service shut down, then clean up.
trap ':' INT
scripts/with-broker.sh bash -c '
  refused=${MQ_REFUSED_TOPIC:-off}
  if [[ $RUN_ON_LOCAL_BROKER == 1 && $refused != off ]]; then
    scripts/kafka.sh topic "$refused" 6 >/dev/null
    echo "run.sh: refused requests kept on topic $refused (make refused prints the last ones)"
  fi
  if [[ $RUN_ON_LOCAL_BROKER == 1 && ${DELIVERY:-at-least-once} == exactly-once ]]; then
    positions=${MQ_POSITIONS_TOPIC:-auto}
    [[ $positions == auto ]] && positions=${MQ_TOPIC:-container.telemetry}.positions
    scripts/kafka.sh topic "$positions" 1 cleanup.policy=compact segment.ms=3600000 >/dev/null
    echo "run.sh: DELIVERY=exactly-once, slot positions on topic $positions (consumers: isolation.level=read_committed)"
  fi
  echo "run.sh: service on ${LISTEN_ADDR:-:8080}, Kafka at $MQ_BROKERS, topic ${MQ_TOPIC:-container.telemetry}, journal in ${JOURNAL_DIR:-journal}/ (Ctrl-C stops)"
  exec node dist/src/main.js'
