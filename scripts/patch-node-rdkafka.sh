#!/usr/bin/env bash
# Applies patches/ to the installed node-rdkafka and rebuilds what they change. npm runs this after
# `npm ci` (package.json "postinstall").
# - librdkafka-2.12-*.patch, to the librdkafka that node-rdkafka bundles:
#   - keep-brokers-on-empty-metadata: librdkafka keeps its brokers when a Metadata answer lists none,
#     instead of dropping them all (README, "A broker that stops answering");
#   - release-per-queue: a delivered MessageSet's accounting and topic references released once, not
#     per message (README, Performance, "librdkafka releases a delivered batch at once").
#   librdkafka is rebuilt with its own `make libs install`: node-rdkafka's gyp action runs only when
#   config.h changes, and the addon loads build/deps/librdkafka.so.1 (about 50 s on 2 cores: the
#   files that include rdkafka_msg.h are compiled again).
# - node-rdkafka-3.6.1-*.patch, to node-rdkafka's addon:
#   - produce-batch: Producer#produceBatch hands librdkafka every message of a request in one native
#     call (README, "One native call per request" says why);
#   - delivery-status: each delivery report carries librdkafka's message status (persisted, possibly
#     persisted, not persisted), which ACK_MODE=delivered answers from.
#   The addon is rebuilt with `node-gyp build`, not `rebuild`: only the changed C++ files are compiled
#   again (about 20 s).
#
# Idempotent: each step does nothing when its result is already in place.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
module=$root/node_modules/node-rdkafka
addon=$module/build/Release/node-librdkafka.node

if [[ ! -d $module ]]; then
  echo "patch-node-rdkafka.sh: node_modules/node-rdkafka is not installed; run npm ci first" >&2
  exit 1
fi
version=$(node -p "require('$module/package.json').version.replace(/^v/, '')")
if [[ $version != 3.6.1 ]]; then
  echo "patch-node-rdkafka.sh: the patch is for node-rdkafka 3.6.1, installed is $version: port patches/ to it" >&2
  exit 1
fi

# quietly WHAT DIR COMMAND...: runs a build in DIR with its output set aside; on failure shows the end
# of that output and stops.
quietly() {
  local what=$1 dir=$2 log
  shift 2
  log=$(mktemp)
  if ! (cd "$dir" && "$@") >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    rm -f "$log"
    echo "patch-node-rdkafka.sh: $what failed (above: the end of its output)" >&2
    exit 1
  fi
  rm -f "$log"
}

# restore_pristine PATCH...: puts back the package's own copies of the files that the patches change
# (npm's cache has the package), for sources patched by an earlier version of patches/. Copied without
# their dates, so that make compiles them again.
restore_pristine() {
  local pristine file
  pristine=$(mktemp -d)
  (cd "$pristine" && npm pack "node-rdkafka@$version" --silent >/dev/null && tar -xzf "node-rdkafka-$version.tgz")
  for file in $(sed -n 's|^+++ b/||p' "$@"); do cp "$pristine/package/$file" "$module/$file"; done
  rm -rf "$pristine"
}

# --- librdkafka: patches/librdkafka-2.12-*.patch ---
lib=$module/build/deps/librdkafka.so.1
# The stamp holds the checksum of the library built from the sources with every patch applied, and
# the patch set's own checksum: a library built before a patch was added (or by node-rdkafka's own
# install afterwards) does not match it.
lib_stamp=$module/build/deps/.librdkafka-patches.sha256
lib_patches=("$root"/patches/librdkafka-2.12-*.patch)
patch_set=$(cat "${lib_patches[@]}" | sha256sum | cut -d' ' -f1)
# Applied already when it reverses exactly; applicable when it applies exactly (--dry-run: nothing is
# written). Neither: an earlier version of it is in the sources.
applied() { patch --directory="$module" --strip=1 --reverse --dry-run --force --fuzz=0 --quiet <"$1" >/dev/null 2>&1; }
applicable() { patch --directory="$module" --strip=1 --forward --dry-run --fuzz=0 --quiet <"$1" >/dev/null 2>&1; }
for lib_patch in "${lib_patches[@]}"; do
  if ! applied "$lib_patch" && ! applicable "$lib_patch"; then
    restore_pristine "${lib_patches[@]}"
    echo "patch-node-rdkafka.sh: restored the librdkafka files that patches/ change (an earlier version of $(basename "$lib_patch") was in them)"
    break
  fi
done
for lib_patch in "${lib_patches[@]}"; do
  if applied "$lib_patch"; then
    echo "patch-node-rdkafka.sh: librdkafka sources already have $(basename "$lib_patch")"
  else
    patch --directory="$module" --strip=1 --forward --quiet <"$lib_patch"
    echo "patch-node-rdkafka.sh: applied $(basename "$lib_patch")"
  fi
done
if [[ -f $lib && -f $lib_stamp ]] && grep -qx "# patches $patch_set" "$lib_stamp" &&
  (cd "$(dirname "$lib")" && sha256sum --check --status "$lib_stamp"); then
  echo "patch-node-rdkafka.sh: librdkafka already built from the patched sources"
else
  echo "patch-node-rdkafka.sh: rebuilding librdkafka (the changed files are compiled again)"
  quietly "make libs install in deps/librdkafka" "$module/deps/librdkafka" make libs install
  # Relative to build/deps: a node_modules copied elsewhere (the image) still checks.
  { echo "# patches $patch_set"; (cd "$(dirname "$lib")" && sha256sum "$(basename "$lib")"); } >"$lib_stamp"
  echo "patch-node-rdkafka.sh: librdkafka rebuilt into build/deps"
fi

# --- node-rdkafka: patches/node-rdkafka-3.6.1-*.patch ---
# The addon's stamp, like librdkafka's: the patch set's checksum and the addon's, so that an addon
# built before a patch was added, or by npm reinstalling node-rdkafka, is built again.
addon_stamp=$module/build/Release/.node-rdkafka-patches.sha256
addon_patches=("$root"/patches/node-rdkafka-3.6.1-*.patch)
addon_set=$(cat "${addon_patches[@]}" | sha256sum | cut -d' ' -f1)
for addon_patch in "${addon_patches[@]}"; do
  if ! applied "$addon_patch" && ! applicable "$addon_patch"; then
    restore_pristine "${addon_patches[@]}"
    echo "patch-node-rdkafka.sh: restored the node-rdkafka files that patches/ change (an earlier version of $(basename "$addon_patch") was in them)"
    break
  fi
done
for addon_patch in "${addon_patches[@]}"; do
  if applied "$addon_patch"; then
    echo "patch-node-rdkafka.sh: node-rdkafka sources already have $(basename "$addon_patch")"
  else
    # --forward: refuse (not reverse) a patch that seems applied already; a partial state fails loudly.
    patch --directory="$module" --strip=1 --forward --quiet <"$addon_patch"
    echo "patch-node-rdkafka.sh: applied $(basename "$addon_patch")"
  fi
done

if [[ -f $addon && -f $addon_stamp ]] && grep -qx "# patches $addon_set" "$addon_stamp" &&
  (cd "$(dirname "$addon")" && sha256sum --check --status "$addon_stamp"); then
  echo "patch-node-rdkafka.sh: the addon is built from the patched sources"
  exit 0
fi
# npm puts its bundled node-gyp on the PATH of lifecycle scripts; run by hand, use npm's copy.
gyp=(node-gyp)
if ! command -v node-gyp >/dev/null; then
  gyp=(node "$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")/node_modules/node-gyp/bin/node-gyp.js")
fi
echo "patch-node-rdkafka.sh: rebuilding the node-rdkafka addon (librdkafka itself is kept)"
quietly "node-gyp build" "$module" "${gyp[@]}" build
{ echo "# patches $addon_set"; (cd "$(dirname "$addon")" && sha256sum "$(basename "$addon")"); } >"$addon_stamp"
echo "patch-node-rdkafka.sh: node-rdkafka addon rebuilt with patches/"
