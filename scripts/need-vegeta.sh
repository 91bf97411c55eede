#!/usr/bin/env bash
# vegeta, the open-loop HTTP load generator (github.com/tsenart/vegeta) that `make bench` and `make
# bench-gateway` use to show what a performance engineer's own tool sees: built once from the Go module
# proxy into .cache/bin (needs Go), then reused. Prints the binary's path.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VERSION=v12.13.0
bin=$ROOT/.cache/bin/vegeta
if [[ -x $bin && $("$bin" -version 2>/dev/null | grep -o 'v[0-9.]*' | head -n1) == "$VERSION" ]]; then
  echo "$bin"
  exit 0
fi
command -v go >/dev/null || { echo "need-vegeta.sh: Go is needed to build vegeta $VERSION (https://go.dev/dl)" >&2; exit 1; }
mkdir -p "$ROOT/.cache/bin"
echo "need-vegeta.sh: building vegeta $VERSION into .cache/bin" >&2
GOBIN=$ROOT/.cache/bin go install -ldflags "-X main.Version=$VERSION" "github.com/tsenart/vegeta/v12@$VERSION" >&2
echo "$bin"
