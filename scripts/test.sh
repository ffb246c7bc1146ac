#!/usr/bin/env bash
# The README's test command: installs what is missing, builds everything, and runs the whole suite through
# ctest: the GoogleTest binaries (among them the checks against the golden and reference data in tests/data)
# and the fuzz targets. The Python reference tools are not part of it: they need PyTorch and NumPy (Debian's
# python3-torch, python3-numpy), which this script does not install; run them by hand:
#   /usr/bin/python3 tools/reference/check_golden.py tests/data/golden/zaya1_like tests/data/ref_*
#   /usr/bin/python3 -m unittest discover -s tools/reference -p 'test_*.py'
set -euo pipefail
cd "$(dirname "$0")/.."
ZAYA_SETUP_ARGS=--test bash scripts/build.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
# Test binaries link the library directly (no zaya main), so choose the wait policy here (see apps/zaya/main.cpp).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
cd build
ctest --output-on-failure --timeout 900 -j1 "$@"
