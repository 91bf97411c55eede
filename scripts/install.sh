#!/usr/bin/env bash
# Installs the npm dependencies when package-lock.json changed since the last install (or none was
# made). node-rdkafka compiles librdkafka here: about 2 minutes on 2 cores, once; then the postinstall
# script patches librdkafka and node-rdkafka (patches/) and rebuilds both: about 1 minute more (3 min 7 s
# in all from a fresh clone, 2026-11-25).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
stamp=node_modules/.install-stamp
if [[ -f $stamp && $stamp -nt package-lock.json && -f node_modules/node-rdkafka/build/Release/node-librdkafka.node ]]; then
  echo "install.sh: dependencies up to date"
  # A node_modules from before patches/ existed: patch it now (a no-op once done).
  scripts/patch-node-rdkafka.sh >/dev/null
  exit 0
fi
echo "install.sh: npm ci (node-rdkafka builds librdkafka: about 2 minutes the first time)"
npm ci --no-audit --no-fund
touch "$stamp"
echo "install.sh: dependencies installed"
