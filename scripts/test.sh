#!/usr/bin/env bash
# `make test`: every test, against a real Kafka broker. Starts the local broker when MQ_BROKERS is
# not set and none is running, and stops it afterwards if it started it. Extra arguments go to vitest.
# VITEST_JSON=path also writes vitest's JSON report there (CI counts passed and failed tests from it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
started_broker=0
if [[ -z ${MQ_BROKERS:-} ]]; then
  if ! scripts/kafka.sh status | grep -q 'single running'; then
    scripts/kafka.sh start
    started_broker=1
  fi
  export MQ_BROKERS=127.0.0.1:9092
fi
cleanup() {
  if ((started_broker)); then scripts/kafka.sh stop; fi
}
trap cleanup EXIT
report=()
if [[ -n ${VITEST_JSON:-} ]]; then
  mkdir -p "$(dirname "$VITEST_JSON")"
  report=(--reporter=default --reporter=json --outputFile.json="$VITEST_JSON")
fi
npx vitest run "${report[@]}" "$@"
