#!/usr/bin/env bash
# The tests on the Node.js versions this host does not run: inside the Debian 13 root of the image
# (scripts/image-build.sh root, Node 24), in a network namespace of its own, so that its broker,
# gateways and services use the ports they always use, beside whatever runs on the host.
#
#   scripts/test-in-root.sh [VITEST ARGS...]   `make test` on Node 24: every vitest file, against a
#                                              broker started in the root (make test-node24)
#   scripts/test-in-root.sh --smoke 22         the smoke test (test/smoke) on Node 22: the tree of the
#                                              Node 24 run, with the Kafka client's addon built again for
#                                              Node 22's ABI (the journal's addon is Node-API: as it is)
#   scripts/test-in-root.sh --prepare          only the root, up to date with this checkout (the image
#                                              test starts the service from its /app)
#   scripts/test-in-root.sh --tree 20          also /src-node20 in it: this checkout on Node 20 (the
#                                              benchmark of one Node against another, bench/README.md)
#
# TEST_ROOT: the root (.cache/debian13-node24). VITEST_JSON: vitest's JSON report, copied out of the root.
# The first run builds the root and compiles the Kafka client in it (about 6 minutes on 2 cores); later
# runs copy this checkout in and test.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=${TEST_ROOT:-$PWD/.cache/debian13-node24}
# What scripts/test.sh installs on the host (servers of the gateway tests, jemalloc), Java for the
# broker, and what the tests call (pgrep, openssl for the broker's TLS material).
TEST_PACKAGES=(make procps openssl openjdk-21-jre-headless nginx libnginx-mod-http-lua lua-nginx-redis redis-server haproxy apache2-utils wrk)
export ROOT_EXTRA_PACKAGES="${TEST_PACKAGES[*]}"
scripts/image-build.sh root "$root"
# The broker's jars, from this checkout's cache (the root has no Maven), again when their version changed.
scripts/kafka.sh fetch
if ! diff -q <(ls .cache/kafka/lib) <(ls "$root/src/.cache/kafka/lib" 2>/dev/null) >/dev/null; then
  rm -rf "$root/src/.cache/kafka/lib"
  mkdir -p "$root/src/.cache/kafka"
  cp -a .cache/kafka/lib "$root/src/.cache/kafka/"
fi
# The Schema Registry's distribution (the registry tests start it) likewise, from this checkout's cache.
scripts/registry.sh fetch
if ! diff -q <(ls .cache/registry) <(ls "$root/src/.cache/registry" 2>/dev/null) >/dev/null; then
  rm -rf "$root/src/.cache/registry"
  mkdir -p "$root/src/.cache"
  cp -a .cache/registry "$root/src/.cache/"
fi
[[ ${1:-} == --prepare ]] && exit 0
report=()
[[ -n ${VITEST_JSON:-} ]] && report=(VITEST_JSON=/src/.run/root-vitest.json)
copy_report() {
  if [[ -n ${VITEST_JSON:-} && -f $root/src/.run/root-vitest.json ]]; then
    mkdir -p "$(dirname "$VITEST_JSON")"
    cp "$root/src/.run/root-vitest.json" "$VITEST_JSON"
  fi
}
trap copy_report EXIT
rm -f "$root/src/.run/root-vitest.json"

# tree MAJOR: /src-node<MAJOR>, the Node 24 tree with the Kafka client's addon configured and built against
# Node MAJOR's headers (librdkafka itself, a plain shared library, is kept; the journal's addon is
# Node-API and serves every version as it is).
tree() {
  local major=$1
  scripts/debian-root.sh node "$root" "$major"
  scripts/debian-root.sh run "$root" -- bash -c 'cd /src && npx tsc -p tsconfig.build.json'
  rm -rf "$root/src-node$major"
  mkdir "$root/src-node$major"
  tar -C "$root/src" --exclude=./.run -cf - . | tar -C "$root/src-node$major" -xf -
  # The headers' directory as debian-root.sh gives it to node-gyp (npm_package_config_node_gyp_nodedir,
  # which takes precedence over --nodedir), and the addon loaded by that Node before it is called built.
  if ! scripts/debian-root.sh run "$root" -- env PATH="/opt/node-$major/bin:/usr/local/bin:/usr/bin:/bin" npm_package_config_node_gyp_nodedir="/opt/node-$major" CKJS_LINKING=dynamic bash -c "cd /src-node$major/node_modules/@confluentinc/kafka-javascript &&
    node /usr/local/lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js configure build && node -e 'require(\"/src-node$major/node_modules/@confluentinc/kafka-javascript\")'" >"$root/src-node$major.build.log" 2>&1; then
    tail -n 30 "$root/src-node$major.build.log" >&2
    echo "test-in-root.sh: building the Kafka client's addon for Node $major failed (above: the end of $root/src-node$major.build.log)" >&2
    exit 1
  fi
  echo "test-in-root.sh: /src-node$major: the Kafka client's addon built for Node $(chroot "$root" "/opt/node-$major/bin/node" --version)"
}

case ${1:-} in
  --tree)
    tree "${2:?usage: test-in-root.sh --tree NODE_MAJOR}"
    exit ;;
  --smoke)
    major=${2:?usage: test-in-root.sh --smoke NODE_MAJOR}
    tree "$major"
    args=()
    [[ -z ${VITEST_JSON:-} ]] || args=(--reporter=default --reporter=json --outputFile.json=/src/.run/root-vitest.json)
    scripts/debian-root.sh run "$root" --own-network -- env PATH="/opt/node-$major/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin" \
      bash -c 'mkdir -p /src/.run && cd "$1" && shift && scripts/with-broker.sh node node_modules/vitest/vitest.mjs run test/smoke "$@"' _ "/src-node$major" "${args[@]}"
    exit ;;
esac

scripts/debian-root.sh run "$root" --own-network -- env "${report[@]}" bash -c 'cd /src && make --no-print-directory build && scripts/test.sh "$@"' _ "$@"
