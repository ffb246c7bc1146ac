#!/usr/bin/env bash
# Configures and builds zaya.cpp (Release, Ninja) into build/. Idempotent; installs dependencies first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh ${ZAYA_SETUP_ARGS:-}
JOBS="${JOBS:-$(nproc)}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build -j"$JOBS" "$@"
