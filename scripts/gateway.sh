#!/usr/bin/env bash
# `make gateway`: the reference gateway (deploy/gateway) in the foreground, nginx from Debian in front
# of the service, rate limits counted in Redis. Ctrl-C stops nginx and the Redis this script started.
#
#   GATEWAY_ADDR        127.0.0.1:8000   where the gateway listens
#   UPSTREAM_ADDR       127.0.0.1:8080   the service (make run)
#   REDIS_URL           (unset)          the shared counter store; unset: a local Redis is started on
#                                        GATEWAY_REDIS_ADDR (127.0.0.1:6379), and a second gateway given
#                                        REDIS_URL=redis://127.0.0.1:6379 shares its counters
#   GATEWAY_API_KEYS    required         required: every request carries an X-Api-Key provisioned with
#                                        scripts/gateway-keys.sh (401 otherwise); off: clients are their address
#   GATEWAY_RATE_LIMIT  1000             requests per second per client (a key's own limit comes first); 0: off
#   GATEWAY_RATE_LIMIT_SYNC_MS  10       how often each nginx worker adds its counts to Redis; 0: every
#                                        request counted in Redis (exact across instances, dearer)
#   GATEWAY_KEY_CACHE_S 10               how long a key's lookup is kept (a revoked key works that long)
#   GATEWAY_IDEMPOTENCY_WINDOW_S 86400   how long a request's Idempotency-Key and its 202 are kept; 0: ignored
#   GATEWAY_IDEMPOTENCY_SYNC_MS 5        how often at most each nginx worker writes its Idempotency-Keys to Redis,
#                                        all in one round trip (a keyed request waits for the next); 0: every turn
#   MAX_BODY_BYTES      1048576          the service's body limit, enforced here first
#   GATEWAY_WORKERS     auto             nginx worker processes
#   GATEWAY_ACCESS_LOG  off              a path for nginx's JSON access log (buffered 64 KiB / 1 s), or off
#   GATEWAY_RUN_DIR     .run/gateway/PORT    rendered config, pid files, temporary files
#   GATEWAY_LUA_DIR     deploy/gateway/lua   where track_gateway.lua is read (bench-gateway's floor row: a cut copy)
#
#   scripts/gateway.sh render   only writes RUN_DIR/nginx.conf and prints its path
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

say() { printf 'gateway.sh: %s\n' "$*"; }
die() { printf 'gateway.sh: %s\n' "$*" >&2; exit 2; }

export GATEWAY_ADDR=${GATEWAY_ADDR:-127.0.0.1:8000}
export UPSTREAM_ADDR=${UPSTREAM_ADDR:-127.0.0.1:8080}
export GATEWAY_RATE_LIMIT=${GATEWAY_RATE_LIMIT:-1000}
export MAX_BODY_BYTES=${MAX_BODY_BYTES:-1048576}
export GATEWAY_WORKERS=${GATEWAY_WORKERS:-auto}
export GATEWAY_API_KEYS=${GATEWAY_API_KEYS:-required}
export GATEWAY_RATE_LIMIT_SYNC_MS=${GATEWAY_RATE_LIMIT_SYNC_MS:-10}
export GATEWAY_KEY_CACHE_S=${GATEWAY_KEY_CACHE_S:-10}
export GATEWAY_IDEMPOTENCY_WINDOW_S=${GATEWAY_IDEMPOTENCY_WINDOW_S:-86400}
export GATEWAY_IDEMPOTENCY_SYNC_MS=${GATEWAY_IDEMPOTENCY_SYNC_MS:-5}
GATEWAY_REDIS_ADDR=${GATEWAY_REDIS_ADDR:-127.0.0.1:6379}

[[ $GATEWAY_ADDR =~ ^(.*):([0-9]{1,5})$ ]] || die "GATEWAY_ADDR must look like 127.0.0.1:8000, got '$GATEWAY_ADDR'"
port=${BASH_REMATCH[2]}
[[ $UPSTREAM_ADDR =~ ^.+:[0-9]{1,5}$ ]] || die "UPSTREAM_ADDR must look like 127.0.0.1:8080, got '$UPSTREAM_ADDR'"
[[ $GATEWAY_RATE_LIMIT =~ ^[0-9]+$ ]] || die "GATEWAY_RATE_LIMIT must be a whole number of requests per second (0: off), got '$GATEWAY_RATE_LIMIT'"
[[ $GATEWAY_API_KEYS =~ ^(required|off)$ ]] || die "GATEWAY_API_KEYS must be required or off, got '$GATEWAY_API_KEYS'"
[[ $GATEWAY_RATE_LIMIT_SYNC_MS =~ ^[0-9]+$ ]] || die "GATEWAY_RATE_LIMIT_SYNC_MS must be a whole number of milliseconds (0: every request counted in Redis), got '$GATEWAY_RATE_LIMIT_SYNC_MS'"
[[ $GATEWAY_KEY_CACHE_S =~ ^[0-9]+$ ]] || die "GATEWAY_KEY_CACHE_S must be a whole number of seconds, got '$GATEWAY_KEY_CACHE_S'"
[[ $GATEWAY_IDEMPOTENCY_WINDOW_S =~ ^[0-9]+$ ]] || die "GATEWAY_IDEMPOTENCY_WINDOW_S must be a whole number of seconds (0: Idempotency-Key ignored), got '$GATEWAY_IDEMPOTENCY_WINDOW_S'"
[[ $GATEWAY_IDEMPOTENCY_SYNC_MS =~ ^[0-9]+$ ]] || die "GATEWAY_IDEMPOTENCY_SYNC_MS must be a whole number of milliseconds (0: each key written in the event loop's turn it came in), got '$GATEWAY_IDEMPOTENCY_SYNC_MS'"
[[ $MAX_BODY_BYTES =~ ^[0-9]+$ ]] || die "MAX_BODY_BYTES must be a whole number of bytes, got '$MAX_BODY_BYTES'"
[[ $GATEWAY_WORKERS =~ ^(auto|[1-9][0-9]*)$ ]] || die "GATEWAY_WORKERS must be auto or a number, got '$GATEWAY_WORKERS'"
[[ -z ${REDIS_URL:-} || $REDIS_URL =~ ^redis:// ]] || die "REDIS_URL must look like redis://host:port[/db], got '$REDIS_URL'"

export GATEWAY_RUN_DIR=${GATEWAY_RUN_DIR:-$ROOT/.run/gateway/$port}
export GATEWAY_LUA_DIR=${GATEWAY_LUA_DIR:-$ROOT/deploy/gateway/lua}
export GATEWAY_ERROR_LOG=${GATEWAY_ERROR_LOG:-stderr}
access_log=${GATEWAY_ACCESS_LOG:-off}
if [[ $access_log == off ]]; then export GATEWAY_ACCESS_LOG=off
else export GATEWAY_ACCESS_LOG="$access_log track_gateway buffer=64k flush=1s"; fi

render() {
  mkdir -p "$GATEWAY_RUN_DIR"/tmp/{body,proxy,fastcgi,uwsgi,scgi}
  # nginx started as root runs its workers as nobody: they write the temporary files.
  if ((EUID == 0)); then chown -R nobody "$GATEWAY_RUN_DIR/tmp"; fi
  # Only the placeholders the template names are replaced; nginx's own $variables are left alone.
  perl -pe 's/\$\{(GATEWAY_[A-Z_]+|UPSTREAM_ADDR|MAX_BODY_BYTES)\}/exists $ENV{$1} ? $ENV{$1} : die "unset: $1\n"/ge' \
    "$ROOT/deploy/gateway/nginx.conf.template" >"$GATEWAY_RUN_DIR/nginx.conf"
}

if [[ ${1:-} == render ]]; then
  render
  echo "$GATEWAY_RUN_DIR/nginx.conf"
  exit 0
fi

# Debian's packages, installed when missing (as root; otherwise the script says what to install).
needs=(nginx:nginx /usr/lib/nginx/modules/ngx_http_lua_module.so:libnginx-mod-http-lua
  /usr/share/lua/5.1/nginx/redis.lua:lua-nginx-redis)
[[ -n ${REDIS_URL:-} ]] || needs+=(redis-server:redis-server)
"$ROOT/scripts/need-packages.sh" "${needs[@]}" || exit 2

render
redis_pid=
nginx_pid=
cleanup() {
  trap - EXIT INT TERM
  if [[ -n $nginx_pid ]] && kill -0 "$nginx_pid" 2>/dev/null; then
    kill -QUIT "$nginx_pid" 2>/dev/null || true # graceful: requests in flight are answered
    for _ in $(seq 100); do kill -0 "$nginx_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$nginx_pid" 2>/dev/null || true
  fi
  if [[ -n $redis_pid ]]; then
    kill -TERM "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
    say "stopped the local Redis"
  fi
  say "stopped"
}
trap cleanup EXIT
trap 'exit 0' INT TERM

if [[ -z ${REDIS_URL:-} ]]; then
  [[ $GATEWAY_REDIS_ADDR =~ ^(.*):([0-9]{1,5})$ ]] || die "GATEWAY_REDIS_ADDR must look like 127.0.0.1:6379, got '$GATEWAY_REDIS_ADDR'"
  redis_host=${BASH_REMATCH[1]}
  redis_port=${BASH_REMATCH[2]}
  # The API keys persist in RUN_DIR/dump.rdb (saved every minute after a change, and at stop); the
  # counters live two seconds.
  redis-server --bind "$redis_host" --port "$redis_port" --save '60 1' --appendonly no --daemonize no \
    --dir "$GATEWAY_RUN_DIR" --logfile "$GATEWAY_RUN_DIR/redis.log" &
  redis_pid=$!
  echo "$redis_pid" >"$GATEWAY_RUN_DIR/redis.pid"
  for _ in $(seq 50); do
    redis-cli -h "$redis_host" -p "$redis_port" ping >/dev/null 2>&1 && break
    kill -0 "$redis_pid" 2>/dev/null || { redis_pid=; die "Redis did not start on $GATEWAY_REDIS_ADDR (port in use? set REDIS_URL to use a running one): $(tail -n 3 "$GATEWAY_RUN_DIR/redis.log")"; }
    sleep 0.1
  done
  export REDIS_URL=redis://$GATEWAY_REDIS_ADDR
  say "local Redis on $REDIS_URL (pid $redis_pid); a second gateway given REDIS_URL=$REDIS_URL shares its counters"
fi

nginx -p "$GATEWAY_RUN_DIR" -c "$GATEWAY_RUN_DIR/nginx.conf" -t -q || die "nginx refused $GATEWAY_RUN_DIR/nginx.conf"
nginx -p "$GATEWAY_RUN_DIR" -c "$GATEWAY_RUN_DIR/nginx.conf" -g 'daemon off;' &
nginx_pid=$!
if [[ $GATEWAY_API_KEYS == required ]]; then
  say "API keys required (GATEWAY_API_KEYS=required): REDIS_URL=$REDIS_URL scripts/gateway-keys.sh add FLEET [LIMIT] prints a new one"
fi
say "gateway on http://$GATEWAY_ADDR -> service http://$UPSTREAM_ADDR, $GATEWAY_RATE_LIMIT requests/s per client unless its key says otherwise, counted in $REDIS_URL every ${GATEWAY_RATE_LIMIT_SYNC_MS} ms (pid $nginx_pid; Ctrl-C stops)"
wait "$nginx_pid" || true
nginx_pid=
