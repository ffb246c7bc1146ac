#!/usr/bin/env bash
# Forward speed of zaya.cpp beside the PyTorch reference (tools/reference, which mirrors the Hugging Face
# implementation) on the same model config, batch and threads, measured in one run, dtype by dtype.
# Prints both JSON lines per dtype and a summary with the ratio and zaya's MFU against the GEMM peak
# measured in the same run. Needs /usr/bin/python3 with python3-torch (Debian) for the reference side.
#   bench/forward_vs_torch.sh [BUILD_DIR] [CONFIG] [BATCH] [SEQ]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
CONFIG=${2:-configs/mid.json}
B=${3:-4}
S=${4:-512}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
out=$(mktemp)
for dt in fp32 bf16; do
  t=$(/usr/bin/python3 tools/reference/bench_torch.py --config "$CONFIG" --batch "$B" --seq "$S" --dtype $dt \
      --threads "$OMP_NUM_THREADS" --repeats 3 | tail -1)
  z=$("$BUILD/zaya" bench forward --config "$CONFIG" --batch "$B" --seq "$S" --dtype $dt --repeats 3 2>/dev/null)
  echo "torch $dt: $t"
  echo "zaya  $dt: $z"
  echo "$dt $t" >> "$out"
  echo "$dt $z" >> "$out"
done
/usr/bin/python3 - "$out" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    dt, js = line.split(" ", 1)
    j = json.loads(js)
    rows.setdefault(dt, []).append(j)
print("\n| dtype | PyTorch tok/s | zaya tok/s | zaya / PyTorch | zaya MFU | GEMM peak GFLOP/s |")
print("| --- | --- | --- | --- | --- | --- |")
for dt, (t, z) in rows.items():
    peak = z["peak_gflops_bf16" if dt == "bf16" else "peak_gflops_fp32"]
    print(f"| {dt} | {t['tokens_per_s']:.0f} | {z['tokens_per_s']:.0f} | {z['tokens_per_s'] / t['tokens_per_s']:.2f}x "
          f"| {z['mfu'] * 100:.1f}% | {peak:.0f} |")
PY
rm -f "$out"
