#!/usr/bin/env bash
# `make run`: the service in the foreground, against MQ_BROKERS or the local broker (see with-broker.sh).
# Ctrl-C: the service drains and flushes, then the broker is stopped if it was started for this run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec scripts/with-broker.sh bash -c 'echo "run.sh: service on ${LISTEN_ADDR:-:8080}, Kafka at $MQ_BROKERS, topic ${MQ_TOPIC:-container.telemetry}, journal in ${JOURNAL_DIR:-journal}/ (Ctrl-C stops)"; exec node dist/src/main.js'
