#!/usr/bin/env bash
# Training speed of zaya.cpp beside PyTorch training the reference implementation (tools/reference, which
# mirrors the Hugging Face one: autograd + torch.optim.AdamW, bf16 = autocast) on the same model config,
# batch and threads, measured in one run, dtype by dtype. Both sides take a full step: forward, backward,
# gradient clipping, AdamW on every parameter (zaya: `bench train --optimizer adamw`; its bf16 mode keeps
# fp32 master weights, gradients and optimizer state, as autocast does). Prints both JSON lines per dtype and
# a summary with the ratio and zaya's MFU against the GEMM peak measured in the same run.
# Needs /usr/bin/python3 with python3-torch (Debian) for the reference side.
#   bench/train_vs_torch.sh [BUILD_DIR] [CONFIG] [BATCH] [SEQ]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
CONFIG=${2:-configs/mid.json}
B=${3:-4}
S=${4:-512}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
out=$(mktemp)
for dt in fp32 bf16; do
  t=$(/usr/bin/python3 tools/reference/bench_torch.py --train --config "$CONFIG" --batch "$B" --seq "$S" \
      --dtype $dt --threads "$OMP_NUM_THREADS" --repeats 3 | tail -1)
  z=$("$BUILD/zaya" bench train --config "$CONFIG" --batch "$B" --seq "$S" --dtype $dt --steps 3 \
      --optimizer adamw 2>/dev/null)
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
    rows.setdefault(dt, []).append(json.loads(js))
print("\n| dtype | PyTorch tok/s | zaya tok/s | zaya / PyTorch | zaya MFU | GEMM peak GFLOP/s | zaya peak RSS MB |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for dt, (t, z) in rows.items():
    peak = z["peak_gflops_bf16" if dt == "bf16" else "peak_gflops_fp32"]
    print(f"| {dt} | {t['tokens_per_s']:.1f} | {z['tokens_per_s']:.1f} | {z['tokens_per_s'] / t['tokens_per_s']:.2f}x "
          f"| {z['mfu'] * 100:.1f}% | {peak:.0f} | {z['peak_rss_mb']:.0f} |")
PY
rm -f "$out"
