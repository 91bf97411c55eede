#!/usr/bin/env bash
# `make test`: every test against real Kafka brokers (see with-broker.sh), in three lanes at once:
#   cluster  the 3-broker cluster's fault tests, which kill and freeze its brokers
#   faults   the files that freeze, stop or restart the local broker (127.0.0.1:9092), one at a time
#   shared   the other files, one at a time, on a second local broker (127.0.0.1:9392, .run/kafka-shared)
#            that no test stops; then the fencing broker's test
# They share no broker, so no lane's faults reach another's tests. Then, once all three are done:
#   alone    the files whose timing the busy machine breaks (the gateway's Idempotency-Key waits 50 ms
#            at most for Redis, and beside the other lanes retries were passed on unchecked; the
#            event-loop delay test read a descheduled process as a blocked loop)
# Which file is where: vitest.config.ts's projects. Each line of output is prefixed with its lane's name.
#   scripts/test.sh                every test, in the lanes
#   scripts/test.sh --fast         the developer's loop (make test-fast): the unit, integration and
#                                  smoke tests, in the same lanes, without the fault suites
#   scripts/test.sh ARGS...        one vitest run of ARGS (files, -t NAME...), as `npx vitest run ARGS`
# VITEST_JSON=path also writes vitest's JSON report there, the lanes' merged (CI counts passed and
# failed tests from it). With MQ_BROKERS set to a broker of your own, the shared lane uses it too.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The gateway tests start nginx (with Lua and lua-resty-redis), Redis, HAProxy and ApacheBench; the
# start-up test checks that the workers run on jemalloc (WORKER_MALLOC=auto), as in the image.
scripts/need-packages.sh nginx:nginx /usr/lib/nginx/modules/ngx_http_lua_module.so:libnginx-mod-http-lua \
  /usr/share/lua/5.1/nginx/redis.lua:lua-nginx-redis redis-server:redis-server haproxy:haproxy ab:apache2-utils \
  /usr/lib/x86_64-linux-gnu/libjemalloc.so.2:libjemalloc2

# lane NAME VITEST_ARGS...: one vitest run, its report in .run/test/NAME.json, its lines prefixed.
lane() {
  local name=$1 code=0
  shift
  npx vitest run --reporter=default --reporter=json --outputFile.json=".run/test/$name.json" --passWithNoTests "$@" "${filters[@]}" 2>&1 | sed -u "s/^/$name | /" || code=$?
  echo "test.sh: the $name lane ended (exit $code) after $((SECONDS - started)) s"
  return "$code"
}

if [[ ${1:-} == --lanes ]]; then
  shift
  # The files of every lane, filtered (--fast): a lane left with none passes.
  filters=("$@")
  mkdir -p .run/test
  rm -f .run/test/cluster.json .run/test/faults.json .run/test/shared.json .run/test/alone.json
  started=$SECONDS
  shared_broker=()
  if [[ $MQ_BROKERS == 127.0.0.1:9092 ]]; then
    shared_broker=(KAFKA_PORT=9392 KAFKA_RUN="$PWD/.run/kafka-shared")
    # Only make test uses this broker: stopped whatever the lanes' end.
    trap 'env "${shared_broker[@]}" scripts/kafka.sh stop >/dev/null' EXIT
  fi
  lane cluster --project cluster &
  cluster=$!
  lane faults --project broker-faults &
  faults=$!
  (
    if ((${#shared_broker[@]})); then
      export "${shared_broker[@]}" MQ_BROKERS=127.0.0.1:9392
      scripts/kafka.sh start 2>&1 | sed -u 's/^/shared | /'
    fi
    lane shared --project shared-broker --project fencing
  ) &
  shared=$!
  status=0
  wait "$cluster" || status=$?
  wait "$faults" || status=$?
  wait "$shared" || status=$?
  lane alone --project alone || status=$?
  # The lanes' reports as one (a lane that wrote none counts as a failed file), and the totals.
  node scripts/merge-vitest-reports.mjs "${VITEST_JSON:-.run/test/report.json}" .run/test/cluster.json .run/test/faults.json .run/test/shared.json .run/test/alone.json || status=1
  echo "test.sh: every lane in $((SECONDS - started)) s"
  exit "$status"
fi

filters=()
if (($# > 0)); then
  report=()
  if [[ -n ${VITEST_JSON:-} ]]; then
    mkdir -p "$(dirname "$VITEST_JSON")"
    report=(--reporter=default --reporter=json --outputFile.json="$VITEST_JSON")
  fi
  exec scripts/with-broker.sh npx vitest run "${report[@]}" "$@"
fi
[[ ${1:-} == --fast ]] && exec scripts/with-broker.sh "$0" --lanes test/unit test/integration test/smoke
exec scripts/with-broker.sh "$0" --lanes
