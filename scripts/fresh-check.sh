#!/usr/bin/env bash
# fresh-check.sh: proves the README's commands on a *minimal* fresh Debian 12 (bookworm).
#
# Why: a build and test that pass on a developer machine can lean on packages that happen to be installed
# there. This script runs COMMAND (default `bash scripts/test.sh`) in a chroot made by
# `debootstrap --variant=minbase bookworm`, with nothing pre-installed and a clean environment, so it only
# passes when scripts/setup.sh really installs everything the command needs.
#
# What it does:
#  1. Bootstraps the minbase root once (installing the debootstrap package on the host if missing, from the
#     host's Debian mirror) and caches it as a tarball in $ZAYA_FRESH_CACHE (default
#     /var/cache/zaya-fresh-check); --rebuild-cache (or ZAYA_FRESH_REBUILD=1) makes it again.
#  2. Every run extracts the cached root into a new temporary directory under $ZAYA_FRESH_TMP (default
#     /var/tmp), clones the repository's current commit (HEAD) into /root/zaya.cpp there (from the host side:
#     minbase has no git); uncommitted changes are not included (a warning says so) unless --worktree, which
#     also copies the working tree's tracked and untracked-but-not-ignored files over the clone.
#  3. Gives the root what a fresh machine on the same network would have: the host's apt sources and its
#     Acquire:: settings (e.g. Check-Valid-Until false for a snapshot mirror), its CA bundle and extra CAs, its
#     npm config (host /usr/etc/npmrc -> /etc/npmrc, ~/.npmrc -> /root/.npmrc), /etc/resolv.conf and
#     /etc/hosts. Mounts fresh proc, sysfs, a tmpfs /dev with the basic device nodes, a new devpts instance
#     and a tmpfs /dev/shm (OpenMPI needs shm); nothing of the host's /dev is bind-mounted, so nothing done in
#     the chroot can touch it.
#  4. Runs COMMAND with bash in the clone's directory under `env -i`: HOME=/root, a standard PATH,
#     LANG=C.UTF-8, TERM, and only the proxy / CA variables (http(s)_proxy, no_proxy, NODE_EXTRA_CA_CERTS,
#     SSL_CERT_FILE, SSL_CERT_DIR, CURL_CA_BUNDLE, REQUESTS_CA_BUNDLE, GIT_SSL_CAINFO), the library settings
#     (OPENBLAS_*, OMP_*) and CI that are set on the host.
#  5. On exit (success, failure, Ctrl-C) kills what is left running in the root, unmounts everything and
#     deletes the root (--keep keeps the files, unmounted). Prints the command's wall time and exits with
#     its exit status.
#
# Needs root (debootstrap, mount, chroot). Example:
#   bash scripts/fresh-check.sh --worktree "bash scripts/setup.sh && cmake -S . -B build -G Ninja"
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/fresh-check.sh [OPTIONS] [COMMAND]

Runs COMMAND (default: bash scripts/test.sh) with bash inside a fresh debootstrap --variant=minbase
bookworm chroot, in a clone of the repository's current commit at /root/zaya.cpp, with a clean
environment. Exits with COMMAND's exit status.

Options:
  --worktree        use the working tree (tracked + untracked-not-ignored files, uncommitted changes
                    included) instead of the committed HEAD
  --keep            keep the temporary root (unmounted) for debugging; its path is printed
  --rebuild-cache   bootstrap the cached minbase root again (same as ZAYA_FRESH_REBUILD=1)
  -h, --help        this help

Environment:
  ZAYA_FRESH_CACHE    cache directory for the bootstrapped root (default /var/cache/zaya-fresh-check)
  ZAYA_FRESH_TMP      where temporary roots are made (default /var/tmp; needs several GB for a build)
  ZAYA_FRESH_MIRROR   Debian mirror URI (default: the host's apt source for bookworm)
  ZAYA_FRESH_REBUILD  1 = rebuild the cache
EOF
}

say() { echo "fresh-check: $*" >&2; }
die() { say "error: $*"; exit 2; }

WORKTREE=0
KEEP=0
REBUILD="${ZAYA_FRESH_REBUILD:-0}"
COMMAND=""
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --worktree) WORKTREE=1 ;;
    --keep) KEEP=1 ;;
    --rebuild-cache) REBUILD=1 ;;
    --) shift; COMMAND="$*"; break ;;
    -*) usage >&2; die "unknown option $1" ;;
    *) COMMAND="$*"; break ;;
  esac
  shift
done
COMMAND="${COMMAND:-bash scripts/test.sh}"

[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, mount, chroot)"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SUITE=bookworm
ARCH="$(dpkg --print-architecture)"
CACHE_DIR="${ZAYA_FRESH_CACHE:-/var/cache/zaya-fresh-check}"
TMP_BASE="${ZAYA_FRESH_TMP:-/var/tmp}"
CACHE_TAR="$CACHE_DIR/$SUITE-minbase-$ARCH.tar.gz"
GUEST_DIR=/root/zaya.cpp

# ---- cleanup: kill what still runs in a root, unmount everything under it, delete it ------------------

ROOTS=()       # temporary roots to clean up on exit
KEEP_ROOT=""   # the one root --keep keeps

# Mount points at or under $1, deepest first (from /proc/self/mountinfo; octal escapes decoded).
mounts_under() {
  local root="$1" mp
  while read -r _ _ _ _ mp _; do
    mp="$(printf '%b' "$mp")"
    case "$mp" in "$root"|"$root"/*) echo "$mp" ;; esac
  done </proc/self/mountinfo | sort -r
}

# Processes whose root directory is $1 (what runs in the chroot).
# shellcheck disable=SC2317  # reached from the EXIT trap
procs_in() {
  local root="$1" p r
  for p in /proc/[0-9]*; do
    r="$(readlink "$p/root" 2>/dev/null)" || continue
    [ "$r" = "$root" ] && echo "${p#/proc/}"
  done
  return 0
}

# shellcheck disable=SC2317  # reached from the EXIT trap
teardown_root() {
  local root="$1" keep="$2" pids mp left
  [ -d "$root" ] || return 0
  pids="$(procs_in "$root")"
  if [ -n "$pids" ]; then
    say "stopping processes left in $root: $(echo "$pids" | tr '\n' ' ')"
    # shellcheck disable=SC2086  # a list of pids
    kill -TERM $pids 2>/dev/null || true
    sleep 2
    pids="$(procs_in "$root")"
    # shellcheck disable=SC2086
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
    sleep 1
  fi
  # Everything mounted here is a fresh proc/sysfs/tmpfs/devpts instance (or something the command mounted
  # inside), never a bind of a host directory, so a lazy unmount as a fallback cannot harm the host.
  while read -r mp; do
    [ -n "$mp" ] || continue
    umount "$mp" 2>/dev/null || umount -R "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null \
      || say "warning: cannot unmount $mp"
  done < <(mounts_under "$root")
  left="$(mounts_under "$root")"
  if [ -n "$left" ]; then
    say "warning: still mounted, not deleting $root:"$'\n'"$left"
    return 0
  fi
  if [ "$keep" = 1 ]; then
    say "kept the root (unmounted): $root"
    say "  re-enter: mount -t proc proc $root/proc && chroot $root /bin/bash; umount $root/proc when done"
  else
    rm -rf --one-file-system "$root"
  fi
}

T0=""  # set while COMMAND runs
report_wall() {  # report_wall STATUS
  local wall
  wall=$(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { s = b - a; printf "%.1f s (%dm%02ds)", s, int(s / 60), int(s) % 60 }')
  say "command exited with status $1; wall time $wall"
  T0=""
}

# shellcheck disable=SC2317  # the EXIT trap
on_exit() {
  local rc=$? r
  trap - EXIT INT TERM HUP
  set +e
  [ -n "$T0" ] && report_wall "$rc"
  for r in "${ROOTS[@]}"; do
    if [ "$r" = "$KEEP_ROOT" ]; then teardown_root "$r" 1; else teardown_root "$r" 0; fi
  done
  exit "$rc"
}
trap on_exit EXIT
trap 'say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM HUP

# ---- the host's apt configuration --------------------------------------------------------------------

# The host's apt source files (one-line and deb822).
host_sources() {
  [ -f /etc/apt/sources.list ] && echo /etc/apt/sources.list
  find /etc/apt/sources.list.d -maxdepth 1 -type f \( -name '*.list' -o -name '*.sources' \) 2>/dev/null | sort
  return 0
}

# The host's mirror for $SUITE: the first URI of a source that carries the suite itself.
host_mirror() {
  local f uri
  while read -r f; do
    case "$f" in
      *.sources)
        uri="$(awk -v s="$SUITE" '
          /^[[:space:]]*$/ { if (u != "" && ok) { print u; exit } u = ""; ok = 0; next }
          tolower($1) == "uris:" { u = $2 }
          tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == s) ok = 1 }
          END { if (u != "" && ok) print u }' "$f" | head -n1)" ;;
      *)
        uri="$(awk -v s="$SUITE" '$1 == "deb" { for (i = 2; i < NF; i++) if ($(i + 1) == s && $i !~ /^\[/) { print $i; exit } }' \
          "$f" | head -n1)" ;;
    esac
    [ -n "$uri" ] && { echo "$uri"; return 0; }
  done < <(host_sources)
  echo http://deb.debian.org/debian
}

# apt.conf.d files that hold only Acquire:: settings (validity checks, proxies, index targets): the
# network's settings a fresh machine would be given; other APT/DPkg hooks of this host are not copied.
host_acquire_confs() {
  local f
  for f in /etc/apt/apt.conf.d/*; do
    [ -f "$f" ] || continue
    grep -q 'Acquire' "$f" || continue
    # Strip comments and blank lines; every statement must start with Acquire (or be inside its block).
    if sed -e 's://.*$::' -e 's:#.*$::' "$f" | awk '
        NF == 0 { next }
        depth == 0 && $1 !~ /^Acquire/ { bad = 1 }
        { n = gsub(/\{/, "{"); m = gsub(/\}/, "}"); depth += n - m }
        END { exit bad }'; then
      echo "$f"
    fi
  done
}

# ---- the cached minbase root -------------------------------------------------------------------------

build_cache() {
  local mirror build
  command -v debootstrap >/dev/null 2>&1 || {
    say "installing debootstrap on the host"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
  }
  mirror="${ZAYA_FRESH_MIRROR:-$(host_mirror)}"
  mkdir -p "$CACHE_DIR" "$TMP_BASE"
  build="$(mktemp -d "$TMP_BASE/zaya-fresh-bootstrap.XXXXXX")"
  ROOTS+=("$build")
  chmod 755 "$build"  # it becomes "/": apt's _apt user must traverse it
  say "debootstrap --variant=minbase $SUITE from $mirror (a few minutes)"
  local t0=$SECONDS
  debootstrap --variant=minbase --arch="$ARCH" "$SUITE" "$build" "$mirror" >"$build.log" 2>&1 || {
    tail -n 30 "$build.log" >&2
    die "debootstrap failed (log: $build.log)"
  }
  rm -f "$build.log"
  # Nothing mounted may be left in the tarball.
  while read -r mp; do umount "$mp"; done < <(mounts_under "$build")
  tar -C "$build" --numeric-owner --xattrs --xattrs-include='*' -czpf "$CACHE_TAR.part" .
  mv "$CACHE_TAR.part" "$CACHE_TAR"
  echo "$SUITE minbase $ARCH from $mirror, $(date -u +%FT%TZ)" >"$CACHE_DIR/$SUITE-minbase-$ARCH.info"
  say "cached $CACHE_TAR ($(du -h "$CACHE_TAR" | cut -f1), $((SECONDS - t0)) s)"
}

if [ "$REBUILD" = 1 ] || [ ! -f "$CACHE_TAR" ]; then build_cache; fi

# ---- a fresh root ------------------------------------------------------------------------------------

mkdir -p "$TMP_BASE"
ROOT="$(mktemp -d "$TMP_BASE/zaya-fresh.XXXXXX")"
ROOTS+=("$ROOT")
[ "$KEEP" = 1 ] && KEEP_ROOT="$ROOT"
say "root $ROOT (from $CACHE_TAR)"
tar -C "$ROOT" --numeric-owner --xattrs --xattrs-include='*' -xzpf "$CACHE_TAR"
chmod 755 "$ROOT"  # "/" of the chroot (mktemp made it 0700)

# The repository: a clone of HEAD (self-contained, no hardlinks or alternates into the host's .git).
HEAD_SHA="$(git -C "$REPO" rev-parse HEAD)"
say "commit $HEAD_SHA ($(git -C "$REPO" log -1 --format=%s "$HEAD_SHA" | cut -c1-80))"
git clone -q --no-hardlinks --no-checkout "$REPO" "$ROOT$GUEST_DIR"
git -C "$ROOT$GUEST_DIR" checkout -q --detach "$HEAD_SHA"
if [ "$WORKTREE" = 1 ]; then
  say "--worktree: copying the working tree's uncommitted changes over commit ${HEAD_SHA:0:12}"
  # Tracked files deleted in the working tree go; tracked and untracked-not-ignored files are copied.
  while IFS= read -r -d '' f; do rm -f "$ROOT$GUEST_DIR/$f"; done \
    < <(git -C "$REPO" ls-files -z --deleted)
  while IFS= read -r -d '' f; do
    if [ -e "$REPO/$f" ] || [ -L "$REPO/$f" ]; then printf '%s\0' "$f"; fi
  done < <(git -C "$REPO" ls-files -z --cached --others --exclude-standard) \
    | tar -C "$REPO" --null -T - -cf - | tar -C "$ROOT$GUEST_DIR" -xpf -
else
  if [ -n "$(git -C "$REPO" status --porcelain --untracked-files=normal)" ]; then
    say "warning: the working tree has uncommitted changes; they are NOT included (commit ${HEAD_SHA:0:12};"
    say "         use --worktree to include them):"
    git -C "$REPO" status --short | sed 's/^/    /' >&2
  fi
fi

# What a fresh machine on this network would be given.
copy_in() {  # copy_in HOST_PATH GUEST_PATH
  [ -e "$1" ] || return 0
  mkdir -p "$(dirname "$ROOT$2")"
  cp -L "$1" "$ROOT$2"
}
copy_in /etc/resolv.conf /etc/resolv.conf
copy_in /etc/hosts /etc/hosts
# CAs: the bundle at the same path, and the extra CAs where update-ca-certificates picks them up again
# when a package installs ca-certificates.
copy_in /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
if [ -d /usr/local/share/ca-certificates ]; then
  mkdir -p "$ROOT/usr/local/share/ca-certificates"
  cp -a /usr/local/share/ca-certificates/. "$ROOT/usr/local/share/ca-certificates/"
fi
for v in NODE_EXTRA_CA_CERTS SSL_CERT_FILE CURL_CA_BUNDLE REQUESTS_CA_BUNDLE GIT_SSL_CAINFO; do
  p="${!v:-}"
  if [ -n "$p" ] && [ -f "$p" ] && [ ! -e "$ROOT$p" ]; then copy_in "$p" "$p"; fi
done
# npm: Debian's npm reads /etc/npmrc as its global config.
copy_in /usr/etc/npmrc /etc/npmrc
copy_in "${HOME:-/root}/.npmrc" /root/.npmrc
# apt: the host's sources replace debootstrap's sources.list; keyrings they name come along if missing.
rm -f "$ROOT/etc/apt/sources.list"
while read -r f; do
  copy_in "$f" "$f"
  while read -r key; do
    if [ -f "$key" ] && [ ! -e "$ROOT$key" ]; then copy_in "$key" "$key"; fi
  done < <(grep -hoE '(Signed-By:[[:space:]]*|signed-by=)[^] ]+' "$f" | sed -E 's/^(Signed-By:[[:space:]]*|signed-by=)//')
done < <(host_sources)
while read -r f; do copy_in "$f" "$f"; done < <(host_acquire_confs)

# Mounts: fresh instances only (no bind of the host's /dev).
mount -t proc proc "$ROOT/proc"
mount -t sysfs sysfs "$ROOT/sys"
mount -t tmpfs -o mode=755,nosuid,size=65536k tmpfs "$ROOT/dev"
for node in "null c 1 3" "zero c 1 5" "full c 1 7" "random c 1 8" "urandom c 1 9" "tty c 5 0"; do
  read -r name type major minor <<<"$node"
  mknod -m 666 "$ROOT/dev/$name" "$type" "$major" "$minor"
done
ln -s /proc/self/fd "$ROOT/dev/fd"
ln -s /proc/self/fd/0 "$ROOT/dev/stdin"
ln -s /proc/self/fd/1 "$ROOT/dev/stdout"
ln -s /proc/self/fd/2 "$ROOT/dev/stderr"
ln -s /proc/kcore "$ROOT/dev/core"
mkdir -p "$ROOT/dev/pts" "$ROOT/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5 devpts "$ROOT/dev/pts"
ln -s pts/ptmx "$ROOT/dev/ptmx"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$ROOT/dev/shm"

# The clean environment.
ENVV=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8)
[ -n "${TERM:-}" ] && ENVV+=("TERM=$TERM")
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY NODE_EXTRA_CA_CERTS SSL_CERT_FILE \
         SSL_CERT_DIR CURL_CA_BUNDLE REQUESTS_CA_BUNDLE GIT_SSL_CAINFO CI; do
  [ -n "${!v+x}" ] && ENVV+=("$v=${!v}")
done
while IFS= read -r v; do ENVV+=("$v=${!v}"); done < <(compgen -e | grep -E '^(OPENBLAS|OMP)_' || true)

say "environment: ${ENVV[*]}"
say "running in $GUEST_DIR: $COMMAND"
T0=$(date +%s.%N)
set +e
# shellcheck disable=SC2016  # $1 and $2 are the inner bash's arguments
env -i "${ENVV[@]}" chroot "$ROOT" /bin/bash -c 'cd "$1" && exec /bin/bash -c "$2"' fresh-check "$GUEST_DIR" "$COMMAND"
RC=$?
set -e
report_wall "$RC"
exit "$RC"
