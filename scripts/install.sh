#!/usr/bin/env bash
# Installs the npm dependencies when what they were built from or for changed since the last install:
# package-lock.json, patches/ (applied to node-rdkafka and its librdkafka at install), or the Node ABI
# (node-rdkafka's addon is built for one Node major: switched from Node 20 to 24 without a rebuild,
# the service stops with ERR_DLOPEN_FAILED). npm ci compiles librdkafka: about 2 minutes on 2 cores,
# then the postinstall script patches librdkafka and node-rdkafka and rebuilds both: about 1 minute
# more (3 min 7 s in all from a fresh clone, 2026-11-25). When only the journal's own addon
# (native/journal-files) changed, it alone is rebuilt, in seconds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
stamp=node_modules/.install-stamp
deps="lock $(cat package-lock.json patches/* scripts/patch-node-rdkafka.sh | sha256sum | cut -c1-16); node ABI $(node -p process.versions.modules)"
addon="journal-files $(cat native/journal-files/*.c native/journal-files/binding.gyp native/journal-files/package.json | sha256sum | cut -c1-16)"
if [[ -f $stamp && $(sed -n 1p "$stamp") == "$deps" && -f node_modules/node-rdkafka/build/Release/node-librdkafka.node ]]; then
  if [[ $(sed -n 2p "$stamp") != "$addon" || ! -f native/journal-files/build/Release/journal_files.node ]]; then
    echo "install.sh: the journal's addon changed: rebuilding it"
    npm rebuild @track-ingest/journal-files --no-audit --no-fund >/dev/null
    printf '%s\n%s\n' "$deps" "$addon" >"$stamp"
    echo "install.sh: journal addon rebuilt"
  else
    echo "install.sh: dependencies up to date"
  fi
  exit 0
fi
previous=$([[ -f $stamp ]] && sed -n 1p "$stamp" || true)
why="${previous:-no install stamp} → $deps"
echo "install.sh: npm ci ($why; node-rdkafka builds librdkafka: about 2 minutes)"
npm ci --no-audit --no-fund
printf '%s\n%s\n' "$deps" "$addon" >"$stamp"
echo "install.sh: dependencies installed"
