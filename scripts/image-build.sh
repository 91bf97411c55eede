#!/usr/bin/env bash
# The build steps of the Dockerfile, runnable without Docker. The Dockerfile calls the first two,
# so the image and this script cannot drift apart.
#
#   scripts/image-build.sh deps           scripts/install.sh: npm ci, then the patched Kafka client
#                                         (compiles librdkafka) and the journal's addon, here
#   scripts/image-build.sh compile        tsc, then drop dev dependencies
#   scripts/image-build.sh root DIR       the image's root file system without Docker: Debian 13 with the
#                                         Dockerfile's packages (build and runtime stages in one root),
#                                         Node 24 from the npm registry (scripts/debian-root.sh), then in
#                                         it the build stage in /src (deps, with this checkout) and the
#                                         runtime stage's tree in /app (compile, from /src). Start it with
#                                         scripts/debian-root.sh run DIR -- sh -c 'cd /app && node dist/src/main.js'
#                                         ROOT_EXTRA_PACKAGES: more Debian packages (the tests' servers)
#
# The Dockerfile's apt-get lines name the same packages as BUILD_PACKAGES and RUNTIME_PACKAGES (a test
# holds them together).
set -euo pipefail
BUILD_PACKAGES=(python3 make g++ patch libssl-dev zlib1g-dev libzstd-dev ca-certificates)
RUNTIME_PACKAGES=(libssl3t64 zlib1g libzstd1 libjemalloc2 ca-certificates curl)
NODE_MAJOR=24
step=${1:?usage: image-build.sh deps|compile|root DIR}
case $step in
  deps)
    scripts/install.sh ;;
  compile)
    npx tsc -p tsconfig.build.json
    npm prune --omit=dev --no-audit --no-fund
    # Checks that the patched Kafka client is still the one installed (npm prune must not have
    # reinstalled it); a no-op when it is.
    scripts/build-kafka-client.sh ;;
  root)
    dir=${2:?usage: image-build.sh root DIR}
    repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    # shellcheck disable=SC2206 # one package per word
    extra=(${ROOT_EXTRA_PACKAGES:-})
    "$repo/scripts/debian-root.sh" create "$dir" "$NODE_MAJOR" "${BUILD_PACKAGES[@]}" "${RUNTIME_PACKAGES[@]}" "${extra[@]}"
    # The build stage: this checkout's files (tracked, and new ones not ignored) over /src, whose
    # node_modules, built addons and caches stay, so that npm ci runs again only when the lockfile changed.
    mkdir -p "$dir/src"
    find "$dir/src" -mindepth 1 -maxdepth 1 ! -name node_modules ! -name .cache ! -name native -exec rm -rf {} +
    find "$dir/src/native" -mindepth 2 -maxdepth 2 ! -name build -exec rm -rf {} + 2>/dev/null || true
    (cd "$repo" && git ls-files -z --cached --others --exclude-standard | tar -cf - --null -T - --ignore-failed-read 2>/dev/null) |
      tar -xf - -C "$dir/src"
    echo "image-build.sh: this checkout copied to $dir/src"
    "$repo/scripts/debian-root.sh" run "$dir" -- bash -c 'cd /src && scripts/install.sh'
    # The runtime stage: what the Dockerfile copies out of the build stage, pruned of dev dependencies.
    rm -rf "$dir/app"
    mkdir -p "$dir/app"
    cp -a "$dir/src"/{package.json,package-lock.json,tsconfig.json,tsconfig.build.json,src,scripts,patches,native,node_modules} "$dir/app"/
    "$repo/scripts/debian-root.sh" run "$dir" -- bash -c 'cd /app && scripts/image-build.sh compile' >/dev/null
    rm -rf "$dir/app"/{package-lock.json,tsconfig.json,tsconfig.build.json,src,scripts,patches}
    echo "image-build.sh: the image's root in $dir: the runtime tree in /app ($(du -sh "$dir/app" | cut -f1)), Node $(chroot "$dir" node --version)" ;;
  *)
    echo "image-build.sh: unknown step '$step'" >&2; exit 2 ;;
esac
