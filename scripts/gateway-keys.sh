#!/usr/bin/env bash
# The reference gateway's API keys (GATEWAY_API_KEYS=required), kept in the Redis every gateway
# instance shares: a key is stored as its SHA-256 with a name and a rate limit, never in clear.
#
#   scripts/gateway-keys.sh add NAME [LIMIT]   a new key for NAME (a fleet), LIMIT requests/s (default:
#                                              GATEWAY_RATE_LIMIT, else 1000; 0: unlimited); prints the key, once
#   scripts/gateway-keys.sh limit NAME LIMIT   change NAME's limit
#   scripts/gateway-keys.sh revoke NAME        refused (401) by every gateway within GATEWAY_KEY_CACHE_S
#   scripts/gateway-keys.sh list               names and limits
#
#   REDIS_URL   redis://127.0.0.1:6379   the gateways' Redis (make gateway starts one there)
set -euo pipefail

say() { printf 'gateway-keys.sh: %s\n' "$*" >&2; }
die() { printf 'gateway-keys.sh: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '5,9p' "${BASH_SOURCE[0]}" | sed 's/^# *//' >&2; exit 2; }

REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}
[[ $REDIS_URL =~ ^redis:// ]] || die "REDIS_URL must look like redis://host:port[/db], got '$REDIS_URL'"
command -v redis-cli >/dev/null || die "redis-cli is missing (Debian: apt-get install redis-tools)"
# The hash of each key is gw:apikey:<sha256 hex> (what lua/track_gateway.lua looks up); the names
# index, gw:apikey-names, maps a name to its key's hash.
NAMES=gw:apikey-names
redis() { redis-cli -u "$REDIS_URL" --no-auth-warning "$@"; }
redis ping >/dev/null 2>&1 || die "cannot reach Redis at $REDIS_URL (set REDIS_URL; make gateway starts one on 127.0.0.1:6379)"

valid_name() { [[ $1 =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$ ]] || die "a name is 1 to 64 letters, digits, '.', '_' or '-', got '$1'"; }
valid_limit() { [[ $1 =~ ^[0-9]+$ ]] || die "a limit is a whole number of requests per second (0: unlimited), got '$1'"; }
hash_of() {
  local hash
  hash=$(redis HGET "$NAMES" "$1")
  [[ $hash =~ ^[0-9a-f]{64}$ ]] && echo "$hash"
}

case ${1:-} in
  add)
    (($# >= 2 && $# <= 3)) || usage
    name=$2 limit=${3:-${GATEWAY_RATE_LIMIT:-1000}}
    valid_name "$name"
    valid_limit "$limit"
    key=tk_$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')
    hash=$(printf '%s' "$key" | sha256sum | cut -d' ' -f1)
    [[ $(redis HSETNX "$NAMES" "$name" "$hash") == 1 ]] || die "$name has a key already: revoke it first, or change its limit"
    redis HSET "gw:apikey:$hash" name "$name" limit "$limit" >/dev/null
    say "added a key for $name, $limit requests/s; it is shown once:"
    echo "$key"
    ;;
  limit)
    (($# == 3)) || usage
    valid_name "$2"
    valid_limit "$3"
    hash=$(hash_of "$2") || die "no key named $2"
    redis HSET "gw:apikey:$hash" limit "$3" >/dev/null
    say "$2: $3 requests/s, within GATEWAY_KEY_CACHE_S on every gateway"
    ;;
  revoke)
    (($# == 2)) || usage
    valid_name "$2"
    hash=$(hash_of "$2") || die "no key named $2"
    redis DEL "gw:apikey:$hash" >/dev/null
    redis HDEL "$NAMES" "$2" >/dev/null
    say "revoked the key of $2: refused with 401 within GATEWAY_KEY_CACHE_S on every gateway"
    ;;
  list)
    (($# == 1)) || usage
    printf '%-40s %s\n' NAME LIMIT
    while read -r name; do
      [[ -n $name ]] || continue
      printf '%-40s %s\n' "$name" "$(redis HGET "gw:apikey:$(redis HGET "$NAMES" "$name")" limit)"
    done < <(redis HKEYS "$NAMES")
    ;;
  *) usage ;;
esac
