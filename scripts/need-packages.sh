#!/usr/bin/env bash
# Installs the Debian packages that provide what is missing, each given as CHECK:PACKAGE where CHECK
# is a command on the PATH or an absolute file path:
#   scripts/need-packages.sh nginx:nginx /usr/share/lua/5.1/nginx/redis.lua:lua-nginx-redis
# As root it runs apt-get; otherwise it names the packages to install and fails.
set -euo pipefail
missing=()
for need in "$@"; do
  check=${need%%:*}
  package=${need#*:}
  if [[ $check == /* ]]; then [[ -e $check ]] && continue
  else command -v "$check" >/dev/null && continue; fi
  missing+=("$package")
done
((${#missing[@]})) || exit 0
if ((EUID != 0)); then
  echo "need-packages.sh: missing Debian packages: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "need-packages.sh: installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
echo "need-packages.sh: installed ${missing[*]}"
