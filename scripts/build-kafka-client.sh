#!/usr/bin/env bash
# Builds the Kafka client, @confluentinc/kafka-javascript (node-rdkafka's API, maintained by
# Confluent), from its sources with patches/ applied: librdkafka-*.patch to the librdkafka it bundles
# (deps/librdkafka), kafka-javascript-*.patch to the binding. Each patch opens with what it does, why,
# and what would let it go. scripts/install.sh runs this after `npm ci --ignore-scripts`, so
# librdkafka is compiled once, patched; package.json's postinstall runs it after a plain `npm ci`.
#
# librdkafka is linked against this machine's OpenSSL, zlib, zstd and lz4 (CKJS_LINKING=dynamic): the
# binding's default, a static build, downloads those libraries' sources, which these machines cannot.
# The build must have zstd and lz4 (MQ_OPT_COMPRESSION_TYPE): it fails when librdkafka lacks one.
#
# Works for whatever version package.json installs: a patch that no longer applies stops the build,
# naming the patch and the version to port it to. Idempotent: the sources are patched once, and a
# build is skipped when its stamp says it was made from these patches; node-gyp compiles only what
# changed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
package=@confluentinc/kafka-javascript
module=$root/node_modules/$package
addon=$module/build/Release/confluent-kafka-javascript.node
stamp=$module/build/Release/.track-ingest-patches.sha256
say() { echo "build-kafka-client.sh: $*"; }

[[ -d $module ]] || { say "node_modules/$package is not installed; run scripts/install.sh" >&2; exit 1; }
version=$(node -p "require('$module/package.json').version")
patches=("$root"/patches/*.patch)

# quietly WHAT DIR COMMAND...: runs a build in DIR with its output set aside; on failure shows the end
# of that output and stops.
quietly() {
  local what=$1 dir=$2 log
  shift 2
  log=$(mktemp)
  if ! (cd "$dir" && "$@") >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    rm -f "$log"
    say "$what failed (above: the end of its output)" >&2
    exit 1
  fi
  rm -f "$log"
}

# The files a set of patches changes, relative to the package.
files_of() { sed -n 's|^+++ b/||p' "$@" | sort -u; }
applied() { patch --directory="$module" --strip=1 --reverse --dry-run --force --fuzz=0 --quiet <"$1" >/dev/null 2>&1; }
applicable() { patch --directory="$module" --strip=1 --forward --dry-run --fuzz=0 --quiet <"$1" >/dev/null 2>&1; }
set_sum=$(cat "${patches[@]}" | sha256sum | cut -c1-16)

# --- the sources: exactly patches/, nothing of an earlier set ---
old_files=$([[ -f $stamp ]] && sed -n 's/^# file //p' "$stamp" || true)
restore=0
[[ -f $stamp ]] && ! grep -qx "# patches $set_sum" "$stamp" && restore=1
for p in "${patches[@]}"; do applied "$p" || applicable "$p" || restore=1; done
if ((restore)); then
  # The package's own copies (npm's cache has it), copied without their dates so that make compiles
  # them again.
  pristine=$(mktemp -d)
  (cd "$pristine" && npm pack "$package@$version" --silent >/dev/null && tar -xzf ./*.tgz)
  for f in $( { echo "$old_files"; files_of "${patches[@]}"; } | sed '/^$/d' | sort -u); do
    cp "$pristine/package/$f" "$module/$f"
  done
  rm -rf "$pristine"
  say "restored the files patches/ changes to $package $version's own (the patch set changed)"
fi
for p in "${patches[@]}"; do
  if applied "$p"; then continue; fi
  if ! applicable "$p"; then
    say "patches/$(basename "$p") does not apply to $package $version: port it (docs/operations.md, \"Upgrading librdkafka\")" >&2
    exit 1
  fi
  patch --directory="$module" --strip=1 --forward --quiet <"$p"
  say "applied $(basename "$p")"
done

# --- the build ---
# The stamp names the patch set and the files it changed, and holds the checksums of the addon and the
# librdkafka it loads (sha256sum --check, from build/Release): a build made before a patch changed, or
# by the package's own install script, does not match it.
if [[ -f $addon && -f $stamp ]] && grep -qx "# patches $set_sum" "$stamp" &&
  (cd "$(dirname "$addon")" && sha256sum --check --status "$stamp"); then
  say "$package $version already built from patches/"
else
  # npm puts its bundled node-gyp on the PATH of lifecycle scripts; run by hand, use npm's copy.
  gyp=(node-gyp)
  command -v node-gyp >/dev/null ||
    gyp=(node "$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")/node_modules/node-gyp/bin/node-gyp.js")
  # Node's headers where npm's configuration says (.npmrc nodedir): run by hand, outside npm, node-gyp
  # would try to download them.
  if [[ -z ${npm_config_nodedir:-} ]]; then
    nodedir=$(npm config get nodedir 2>/dev/null || true)
    [[ -n $nodedir && $nodedir != undefined && $nodedir != null ]] && export npm_config_nodedir=$nodedir
  fi
  # librdkafka's own ./configure runs once (its config.h is the gyp action's output); make then
  # compiles what changed (librdkafka's make runs -j itself), and the addon is linked against the
  # librdkafka.so it installed in build/deps. Not JOBS=: node-gyp's parallel make wants config.h
  # before the action that writes it has run.
  [[ -f $module/build/Makefile ]] || quietly "node-gyp configure" "$module" env CKJS_LINKING=dynamic "${gyp[@]}" configure
  say "compiling librdkafka and the binding (a fresh build: about 2 minutes on 2 cores)"
  quietly "node-gyp build" "$module" env CKJS_LINKING=dynamic "${gyp[@]}" build
  {
    echo "# patches $set_sum"
    for f in $(files_of "${patches[@]}"); do echo "# file $f"; done
    (cd "$(dirname "$addon")" && sha256sum "$(basename "$addon")" ../deps/librdkafka.so.1)
  } >"$stamp"
fi

# What was built, and that it has what the service needs.
node -e '
  const k = require(process.argv[1]);
  const missing = ["zstd", "lz4"].filter((f) => !k.features.includes(f));
  if (typeof k.Producer.prototype.produceBatch !== "function") missing.push("produceBatch (patches/)");
  console.log(`build-kafka-client.sh: ${process.argv[2]} ${process.argv[3]} with librdkafka ${k.librdkafkaVersion} (${k.features.join(",")})`);
  if (missing.length) {
    console.error(`build-kafka-client.sh: the build lacks ${missing.join(", ")}: zstd needs libzstd-dev at build time (scripts/install.sh installs it), then rebuild (rm -rf ${process.argv[1]}/build; scripts/build-kafka-client.sh)`);
    process.exit(1);
  }' "$module" "$package" "$version"
