#!/usr/bin/env bash
# Applies patches/ to the installed node-rdkafka and rebuilds what they change. npm runs this after
# `npm ci` (package.json "postinstall").
# - librdkafka-2.12-*.patch, to the librdkafka that node-rdkafka bundles:
#   - acks-counted-per-tag: a message whose opaque is a tag is counted per tag when Kafka
#     acknowledges it, in the broker thread, instead of one delivery report each (the write-ahead
#     journal learns which of its records Kafka has: src/journal/);
#   - keep-brokers-on-empty-metadata: librdkafka keeps its brokers when a Metadata answer lists none,
#     instead of dropping them all (docs/reliability.md, "A broker that stops answering");
#   - release-per-queue: a delivered MessageSet's accounting and topic references released once, not
#     per message (docs/performance.md, "librdkafka releases a delivered batch at once");
#   - timestamp-produce-batch: rd_kafka_produce_batch_at(), produce_batch with the messages'
#     timestamp given (a journal record produced again keeps the time it was accepted).
#   librdkafka is rebuilt with its own `make libs install`: node-rdkafka's gyp action runs only when
#   config.h changes, and the addon loads build/deps/librdkafka.so.1 (about a minute on 2 cores: the
#   files that include rdkafka_int.h are compiled again).
# - node-rdkafka-3.6.1-*.patch, to node-rdkafka's addon (Kafka's work only: the journal's natives are
#   an addon of our own, native/journal-files):
#   - delivery-reports: each delivery report carries librdkafka's message status (persisted,
#     possibly persisted, not persisted), which ACK_MODE=delivered answers from, and the message's
#     tag when it had one;
#   - produce-batch: Producer#produceBatch hands librdkafka every message of a request in one native
#     call (docs/performance.md, "One native call per request", says why), with a tag and a timestamp;
#     Producer#takeAcks and Producer#queueLength;
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

# restore_pristine FILE...: puts back the package's own copies of these files (npm's cache has the
# package), for sources patched by an earlier version of patches/. Copied without their dates, so that
# make compiles them again.
restore_pristine() {
  local pristine file
  pristine=$(mktemp -d)
  (cd "$pristine" && npm pack "node-rdkafka@$version" --silent >/dev/null && tar -xzf "node-rdkafka-$version.tgz")
  for file in "$@"; do cp "$pristine/package/$file" "$module/$file"; done
  rm -rf "$pristine"
}

# The files a set of patches changes.
files_of() { sed -n 's|^+++ b/||p' "$@" | sort -u; }
# Applied already when it reverses exactly; applicable when it applies exactly (--dry-run: nothing is
# written). Neither: an earlier version of it is in the sources.
applied() { patch --directory="$module" --strip=1 --reverse --dry-run --force --fuzz=0 --quiet <"$1" >/dev/null 2>&1; }
applicable() { patch --directory="$module" --strip=1 --forward --dry-run --fuzz=0 --quiet <"$1" >/dev/null 2>&1; }

# patch_sources WHAT STAMP PATCH...: brings the sources to exactly these patches. The stamp of the
# last build names the patch set and the files it changed: when the set changed (a patch added,
# changed or removed), every file of the old set and the new one is restored first, so that nothing
# of a removed patch stays behind; then each patch not yet in the sources is applied, in name order.
patch_sources() {
  local what=$1 stamp=$2 set old_files restore=0 p
  shift 2
  set=$(cat "$@" | sha256sum | cut -d' ' -f1)
  old_files=$( [[ -f $stamp ]] && sed -n 's/^# file //p' "$stamp" || true)
  if [[ -f $stamp ]] && ! grep -qx "# patches $set" "$stamp"; then restore=1; fi
  for p in "$@"; do applied "$p" || applicable "$p" || restore=1; done
  if ((restore)); then
    # shellcheck disable=SC2046 # one file name per word
    restore_pristine $( { echo "$old_files"; files_of "$@"; } | sed '/^$/d' | sort -u)
    echo "patch-node-rdkafka.sh: restored the $what files that patches/ change (the patch set changed)"
  fi
  for p in "$@"; do
    if applied "$p"; then
      echo "patch-node-rdkafka.sh: $what sources already have $(basename "$p")"
    else
      # --forward: refuse (not reverse) a patch that seems applied already; a partial state fails loudly.
      patch --directory="$module" --strip=1 --forward --quiet <"$p"
      echo "patch-node-rdkafka.sh: applied $(basename "$p")"
    fi
  done
}

# built_from STAMP BINARY PATCH...: whether BINARY is the one built after these patches (its stamp).
built_from() {
  local stamp=$1 binary=$2 set
  shift 2
  set=$(cat "$@" | sha256sum | cut -d' ' -f1)
  [[ -f $binary && -f $stamp ]] && grep -qx "# patches $set" "$stamp" &&
    (cd "$(dirname "$binary")" && sed '/^#/d' "$stamp" | sha256sum --check --status)
}

# write_stamp STAMP BINARY PATCH...: the patch set, the files it changed, the binary's checksum
# (relative to its directory: a node_modules copied elsewhere, as in the image, still checks).
write_stamp() {
  local stamp=$1 binary=$2 f
  shift 2
  {
    echo "# patches $(cat "$@" | sha256sum | cut -d' ' -f1)"
    for f in $(files_of "$@"); do echo "# file $f"; done
    (cd "$(dirname "$binary")" && sha256sum "$(basename "$binary")")
  } >"$stamp"
}

# --- node-rdkafka's package.json: the version as the lockfile has it ---
# The package publishes "version": "v3.6.1" and the lockfile says 3.6.1: npm takes the difference for a
# change, and `npm prune` (the image's compile step) reinstalled node-rdkafka every time, undoing every
# patch (`npm prune --dry-run --loglevel=silly` printed "CHANGE node_modules/node-rdkafka"; with the
# version written as 3.6.1 it prints nothing).
if grep -q '"version": "v3.6.1"' "$module/package.json"; then
  sed -i 's/"version": "v3.6.1"/"version": "3.6.1"/' "$module/package.json"
  echo "patch-node-rdkafka.sh: node-rdkafka's package.json says version 3.6.1, as the lockfile does"
fi

# --- librdkafka: patches/librdkafka-2.12-*.patch ---
lib=$module/build/deps/librdkafka.so.1
# The stamp holds the patch set's checksum, the files it changes, and the checksum of the library built
# from the sources with every patch applied: a library built before a patch was added (or by
# node-rdkafka's own install afterwards) does not match it.
lib_stamp=$module/build/deps/.librdkafka-patches.sha256
lib_patches=("$root"/patches/librdkafka-2.12-*.patch)
patch_sources librdkafka "$lib_stamp" "${lib_patches[@]}"
if built_from "$lib_stamp" "$lib" "${lib_patches[@]}"; then
  echo "patch-node-rdkafka.sh: librdkafka already built from the patched sources"
else
  echo "patch-node-rdkafka.sh: rebuilding librdkafka (the changed files are compiled again)"
  quietly "make libs install in deps/librdkafka" "$module/deps/librdkafka" make libs install
  write_stamp "$lib_stamp" "$lib" "${lib_patches[@]}"
  echo "patch-node-rdkafka.sh: librdkafka rebuilt into build/deps"
fi

# --- node-rdkafka: patches/node-rdkafka-3.6.1-*.patch ---
addon_stamp=$module/build/Release/.node-rdkafka-patches.sha256
addon_patches=("$root"/patches/node-rdkafka-3.6.1-*.patch)
patch_sources node-rdkafka "$addon_stamp" "${addon_patches[@]}"
if built_from "$addon_stamp" "$addon" "${addon_patches[@]}"; then
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
write_stamp "$addon_stamp" "$addon" "${addon_patches[@]}"
echo "patch-node-rdkafka.sh: node-rdkafka addon rebuilt with patches/"
