#!/usr/bin/env bash
# `make test`: every test, against a real Kafka broker (see with-broker.sh). Extra arguments go to vitest.
# VITEST_JSON=path also writes vitest's JSON report there (CI counts passed and failed tests from it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
report=()
if [[ -n ${VITEST_JSON:-} ]]; then
  mkdir -p "$(dirname "$VITEST_JSON")"
  report=(--reporter=default --reporter=json --outputFile.json="$VITEST_JSON")
fi
# The gateway tests start nginx (with Lua and lua-resty-redis), Redis, HAProxy and ApacheBench; the
# start-up test checks that the workers run on jemalloc (WORKER_MALLOC=auto), as in the image.
scripts/need-packages.sh nginx:nginx /usr/lib/nginx/modules/ngx_http_lua_module.so:libnginx-mod-http-lua \
  /usr/share/lua/5.1/nginx/redis.lua:lua-nginx-redis redis-server:redis-server haproxy:haproxy ab:apache2-utils \
  /usr/lib/x86_64-linux-gnu/libjemalloc.so.2:libjemalloc2
exec scripts/with-broker.sh npx vitest run "${report[@]}" "$@"
