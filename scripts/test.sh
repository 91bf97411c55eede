#!/usr/bin/env bash
# `make test`: every test against real Kafka brokers (see with-broker.sh), in two lanes at once:
#   cluster  the fault tests that bring up brokers of their own (the 3-broker cluster, the fencing
#            broker) and kill or freeze them, one file at a time; the unit tests, which use none; then
#            the Schema Registry's tests (a registry of their own), then the journal's and ACK_MODE=delivered's
#            fault tests, on a second local broker (127.0.0.1:9492, .run/kafka-second), started for them and
#            stopped after them: that balances the two lanes
#   main     the service's other files, on the local broker, one at a time: those that leave it
#            alone, then those that freeze or stop it
# They share no broker, so neither lane's faults reach the other's tests. Then, once both are done:
#   alone    the files whose timing the busy machine breaks (the gateway's Idempotency-Key waits 50 ms
#            at most for Redis, and beside both lanes retries were passed on unchecked; the event-loop
#            delay test read a descheduled process as a blocked loop)
# Which file is where: vitest.config.ts's projects. Each line of output is prefixed with its lane's name.
#   scripts/test.sh                every test, in the lanes
#   scripts/test.sh --fast         the developer's loop (make test-fast): the unit, integration and
#                                  smoke tests without the fault suites, in two lanes: those that stop
#                                  the local broker, beside the others, two files at a time, on a
#                                  second local broker (127.0.0.1:9392, .run/kafka-shared); then alone.
#                                  The power-cut property runs 20 seeded workloads there (make test: 80)
#   scripts/test.sh ARGS...        one vitest run of ARGS (files, -t NAME...), as `npx vitest run ARGS`
# VITEST_JSON=path also writes vitest's JSON report there, the lanes' merged (CI counts passed and
# failed tests from it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The gateway tests start nginx (with Lua and lua-resty-redis), Redis, HAProxy and ApacheBench; the
# start-up test checks that the workers run on jemalloc (WORKER_MALLOC=auto), as in the image.
scripts/need-packages.sh nginx:nginx /usr/lib/nginx/modules/ngx_http_lua_module.so:libnginx-mod-http-lua \
  /usr/share/lua/5.1/nginx/redis.lua:lua-nginx-redis redis-server:redis-server haproxy:haproxy ab:apache2-utils \
  /usr/lib/x86_64-linux-gnu/libjemalloc.so.2:libjemalloc2

# The tests' brokers start often and carry little: the serial collector and the client compiler halve
# the CPU of a start and take a quarter less idle (bench/HISTORY.md), CPU the tests beside them need.
export KAFKA_BROKER_JVM=${KAFKA_BROKER_JVM:--XX:+UseSerialGC -XX:TieredStopAtLevel=1}

# lane NAME VITEST_ARGS...: one vitest run, its report in .run/test/NAME.json, its lines prefixed.
lane() {
  local name=$1 code=0
  shift
  npx vitest run --reporter=default --reporter=json --outputFile.json=".run/test/$name.json" --passWithNoTests "$@" "${filters[@]}" 2>&1 | sed -u "s/^/$name | /" || code=$?
  echo "test.sh: the $name lane ended (exit $code) after $((SECONDS - started)) s"
  return "$code"
}

# finish_lanes PID PID NAME...: waits for the two lanes, then runs `alone`; merges the reports of the
# lanes NAME... and alone's into one (a lane that wrote none counts as a failed file) and exits with
# the lanes' status.
finish_lanes() {
  local status=0 reports=()
  wait "$1" || status=$?
  wait "$2" || status=$?
  shift 2
  for name in "$@" alone; do reports+=(".run/test/$name.json"); done
  lane alone --project alone || status=$?
  node scripts/merge-vitest-reports.mjs "${VITEST_JSON:-.run/test/report.json}" "${reports[@]}" || status=1
  echo "test.sh: every lane in $((SECONDS - started)) s"
  exit "$status"
}

if [[ ${1:-} == --lanes || ${1:-} == --fast-lanes ]]; then
  mkdir -p .run/test
  rm -f .run/test/*.json
  started=$SECONDS
fi

if [[ ${1:-} == --lanes ]]; then
  filters=()
  second_broker=(KAFKA_PORT=9492 KAFKA_RUN="$PWD/.run/kafka-second")
  trap 'env "${second_broker[@]}" scripts/kafka.sh stop >/dev/null' EXIT
  (
    code=0
    lane cluster --project cluster --project fencing --project unit || code=$?
    export "${second_broker[@]}" MQ_BROKERS=127.0.0.1:9492
    scripts/kafka.sh start 2>&1 | sed -u 's/^/second | /'
    lane second --project registry --project second-broker || code=$?
    scripts/kafka.sh stop 2>&1 | sed -u 's/^/second | /'
    exit "$code"
  ) &
  cluster=$!
  lane main --project shared-broker --project broker-faults &
  finish_lanes "$cluster" $! cluster second main
fi

if [[ ${1:-} == --fast-lanes ]]; then
  filters=(test/unit test/integration test/smoke)
  shared_broker=(KAFKA_PORT=9392 KAFKA_RUN="$PWD/.run/kafka-shared")
  # Only this loop uses that broker: stopped whatever its end.
  trap 'env "${shared_broker[@]}" scripts/kafka.sh stop >/dev/null' EXIT
  lane faults --project broker-faults &
  faults=$!
  (
    export "${shared_broker[@]}" MQ_BROKERS=127.0.0.1:9392 TEST_SHARED_WORKERS=2 POWER_CUT_WORKLOADS=${POWER_CUT_WORKLOADS:-20}
    scripts/kafka.sh start 2>&1 | sed -u 's/^/shared | /'
    lane shared --project shared-broker --project unit --project registry
  ) &
  finish_lanes "$faults" $! faults shared
fi

[[ ${1:-} == --fast ]] && exec scripts/with-broker.sh "$0" --fast-lanes
filters=()
if (($# > 0)); then
  report=()
  if [[ -n ${VITEST_JSON:-} ]]; then
    mkdir -p "$(dirname "$VITEST_JSON")"
    report=(--reporter=default --reporter=json --outputFile.json="$VITEST_JSON")
  fi
  exec scripts/with-broker.sh npx vitest run "${report[@]}" "$@"
fi
exec scripts/with-broker.sh "$0" --lanes
