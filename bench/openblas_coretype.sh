#!/usr/bin/env bash
# Does the OpenBLAS core type change zaya's speed? gemm() used to send tiny fp32 products (< 0.5 MFLOP) to
# OpenBLAS, whose kernel OPENBLAS_CORETYPE selects (some machines set Haswell because older OpenBLAS builds
# misdetect their CPU); now the smallest go to zaya's own kernel (kernels/gemm_small.h), the rest to oneDNN.
# This runs, alternating the two settings ROUNDS times in one run:
#   - gemm_bench's tiny fp32 products (16^3 to 64^3, small-model decode rows) on OpenBLAS, zaya's small
#     kernel, Auto and oneDNN (which does not read the variable: a noise control);
#   - `zaya bench forward` in fp32 on a model whose products are all tiny (the golden config: hidden 128,
#     8 tokens, as in decode or the test suite).
# and prints the best time of each under each setting with the ratio.
#   bench/openblas_coretype.sh [BUILD_DIR] [ROUNDS] [CORETYPE]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-3}
CORE=${3:-Haswell}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
filter='gemm/(tiny|decode_small)/fwd/.*/(openblas|small|auto|onednn|onednn-runtime-m)/f32/'
for r in $(seq "$ROUNDS"); do
  for setting in "$CORE" unset; do
    if [ "$setting" = unset ]; then envs=(-u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE); else envs=(OPENBLAS_CORETYPE="$setting"); fi
    env "${envs[@]}" "$BUILD/bench/gemm_bench" --benchmark_filter="$filter" --benchmark_format=json \
      --benchmark_min_time=0.2 2>/dev/null |
      /usr/bin/python3 -c 'import json,sys; [print(sys.argv[1], b["name"], b["real_time"] * {"ms": 1e3, "us": 1, "ns": 1e-3}[b["time_unit"]]) for b in json.load(sys.stdin)["benchmarks"]]' "$setting" >>"$out"
    tps=$(env "${envs[@]}" "$BUILD/zaya" bench forward --config tests/data/golden/zaya1_like/config.json --batch 1 \
      --seq 8 --dtype fp32 --repeats 20 2>/dev/null | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens_per_s"])')
    echo "$setting zaya-forward-golden-1x8-fp32-us-per-token $(/usr/bin/python3 -c "print(1e6 / $tps)")" >>"$out"
  done
done
/usr/bin/python3 - "$out" "$CORE" <<'PY'
import sys
best = {}
for line in open(sys.argv[1]):
    setting, name, us = line.split()
    key = (name, setting)
    best[key] = min(best.get(key, 1e30), float(us))
core = sys.argv[2]
print(f"| what (best of rounds, lower is better) | OPENBLAS_CORETYPE={core} (us) | unset (us) | {core} / unset |")
print("| --- | --- | --- | --- |")
for name in sorted({n for n, _ in best}):
    a, b = best[(name, core)], best[(name, "unset")]
    print(f"| {name} | {a:.2f} | {b:.2f} | {a / b:.2f} |")
PY
