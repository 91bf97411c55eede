#!/usr/bin/env bash
# Installs the npm dependencies when what they were built from or for changed since the last install:
# package-lock.json, patches/ (applied to the Kafka client and its librdkafka), or the Node ABI (the
# Kafka client's addon is built for one Node major: switched from Node 20 to 24 without a rebuild, the
# service stops with ERR_DLOPEN_FAILED). `npm ci --ignore-scripts` fetches; then the two addons are
# built here: the Kafka client, patched, by scripts/build-kafka-client.sh (it compiles librdkafka once,
# already patched), and the journal's own (native/journal-files). When only the journal's addon
# changed, it alone is rebuilt, in seconds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
stamp=node_modules/.install-stamp
deps="lock $(cat package-lock.json patches/* scripts/build-kafka-client.sh | sha256sum | cut -c1-16); node ABI $(node -p process.versions.modules)"
addon="journal-files $(cat native/journal-files/*.c native/journal-files/binding.gyp native/journal-files/package.json | sha256sum | cut -c1-16)"
if [[ -f $stamp && $(sed -n 1p "$stamp") == "$deps" && -f node_modules/@confluentinc/kafka-javascript/build/Release/confluent-kafka-javascript.node ]]; then
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
# What librdkafka is compiled against: OpenSSL, zlib, zstd (MQ_OPT_COMPRESSION_TYPE=zstd); lz4 is
# bundled. As root the missing ones are installed; otherwise need-packages.sh names them.
scripts/need-packages.sh /usr/include/openssl/ssl.h:libssl-dev /usr/include/zlib.h:zlib1g-dev /usr/include/zstd.h:libzstd-dev patch:patch
previous=$([[ -f $stamp ]] && sed -n 1p "$stamp" || true)
echo "install.sh: npm ci (${previous:-no install stamp} → $deps)"
npm ci --ignore-scripts --no-audit --no-fund
scripts/build-kafka-client.sh
npm rebuild @track-ingest/journal-files --no-audit --no-fund >/dev/null
printf '%s\n%s\n' "$deps" "$addon" >"$stamp"
echo "install.sh: dependencies installed"
