#!/usr/bin/env bash
# The build steps of the Dockerfile, runnable without Docker. The Dockerfile calls the first two,
# so the image and this script cannot drift apart.
#
#   scripts/image-build.sh deps           npm ci (compiles librdkafka, patches node-rdkafka), here
#   scripts/image-build.sh compile        tsc, then drop dev dependencies (and patch node-rdkafka again)
#   scripts/image-build.sh assemble OUT   both, from a copy of this checkout, then the runtime stage's
#                                         layout in OUT: node_modules, native, dist, package.json
set -euo pipefail
step=${1:?usage: image-build.sh deps|compile|assemble OUT}
case $step in
  deps)
    npm ci --no-audit --no-fund ;;
  compile)
    npx tsc -p tsconfig.build.json
    npm prune --omit=dev --no-audit --no-fund
    # npm prune reinstalls node-rdkafka every time (its package.json says version "v3.6.1", the lockfile
    # 3.6.1, and npm takes that for a change: `npm prune --dry-run --loglevel=silly` prints
    # "CHANGE node_modules/node-rdkafka"), which undoes the patch: apply it again.
    scripts/patch-node-rdkafka.sh ;;
  assemble)
    out=${2:?usage: image-build.sh assemble OUT}
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    cp -r "$root"/{package.json,package-lock.json,tsconfig.json,tsconfig.build.json,src,scripts,patches,native} "$work"/
    rm -rf "$work"/native/*/build
    (cd "$work" && scripts/image-build.sh deps && scripts/image-build.sh compile)
    rm -rf "$out"
    mkdir -p "$out"
    cp -r "$work"/{node_modules,dist,package.json,native} "$out"/
    echo "image-build.sh: runtime tree in $out (start it with: cd $out && node dist/src/main.js)" ;;
  *)
    echo "image-build.sh: unknown step '$step'" >&2; exit 2 ;;
esac
