#!/usr/bin/env bash
# The README's test command: installs what is missing, builds everything, and runs the whole suite
# (GoogleTest binaries, fuzz targets, the reference-data checks) through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
# Test binaries link the library directly (no zaya main), so choose the wait policy here (see apps/zaya/main.cpp).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
cd build
ctest --output-on-failure --timeout 900 -j1 "$@"
