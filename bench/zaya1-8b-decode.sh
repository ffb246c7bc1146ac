#!/bin/bash
# The ZAYA1-8B shape on this machine, per weight format: zaya init (bf16, 17.7 GB), zaya quantize into FP8
# experts, Q8_0 experts, MXFP4 experts and Q8_0 everywhere, then zaya bench decode at batch 1 (after a
# 512-token prompt) and at batch 4 and 16; one JSON line per run in OUT/results.jsonl, and a markdown table
# (first the CPU it ran on).
# Needs ~60 GB of disk and ~18 GB of memory; about 30 minutes on 2 cores.
#
# Weights are loaded with --no-mmap (copied into huge pages: a longer load, a faster decode); set
# ZAYA_LOAD_FLAGS= (empty) to decode from the memory-mapped files instead.
#
#   bench/zaya1-8b-decode.sh build /path/to/scratch
set -euo pipefail
build=${1:-build} out=${2:-runs/zaya1-8b}
flags=${ZAYA_LOAD_FLAGS---no-mmap}
Z=$(realpath "$build")/zaya
cfg=$(realpath configs/zaya1-8b.json)
mkdir -p "$out" && cd "$out"
[ -f bf16/config.json ] || $Z init --config "$cfg" --dtype bf16 --out bf16
for spec in "fp8 experts" "q8_0 experts" "mxfp4 experts" "q8_0 all"; do
  set -- $spec
  [ -f "$1_$2/config.json" ] || $Z quantize --model bf16 --out "$1_$2" --scheme "$1" --what "$2"
done
: > results.jsonl
for d in bf16 fp8_experts q8_0_experts mxfp4_experts q8_0_all; do
  cat $d/*.safetensors > /dev/null  # into the page cache: a step must not wait for the disk
  $Z bench decode --model $d $flags --batch 1 --context 512 --tokens 8 --repeats 3 >> results.jsonl
  $Z bench decode --model $d $flags --batch 4,16 --context 16 --tokens 4 --repeats 3 >> results.jsonl
  # BF16 / FP8 products take vdpbf16ps kernels where it is fast (Zen 4 / 5: the bf16 dot kernel, on Zen 5
  # over the bf16 pack too): the same steps on fp32 fmas (the float packed or streaming kernels), to compare.
  if [ "$d" = bf16 ] || [ "$d" = fp8_experts ]; then
    ZAYA_BF16_DOT=0 $Z bench decode --model $d $flags --batch 4,16 --context 16 --tokens 4 --repeats 2 |
      sed 's/^{/{"kernel": "fp32 fma", /' >> results.jsonl
  fi
done
python3 - results.jsonl <<'PY'
import json, sys
print(json.loads(open(sys.argv[1]).readline()).get("cpu", "CPU unknown"))
names = {"bf16": "bf16", "fp8_experts": "FP8 experts", "q8_0_experts": "Q8_0 experts",
         "mxfp4_experts": "MXFP4 experts", "q8_0_all": "Q8_0 everywhere"}
print("| weights | batch | decode tok/s | GB read / step | experts / layer | achieved GB/s | read GB/s | fraction "
      "| prefill tok/s | peak RSS GB | load s |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for line in open(sys.argv[1]):
    j = json.loads(line)
    name = names.get(j['model'], j['model']) + (f" ({j['kernel']} kernels)" if 'kernel' in j else "")
    print(f"| {name} | {j['batch']} | {j['decode_tokens_per_s']:.2f} "
          f"| {j['weight_bytes_per_step'] / 1e9:.2f} | {j['experts_read_per_layer']:.1f} | {j['achieved_gbs']:.1f} "
          f"| {j['read_bandwidth_gbs']:.1f} | {j['bandwidth_fraction']:.2f} "
          f"| {j['prefill_tokens_per_s']:.1f} ({j['context']}) | {j['peak_rss_mb'] / 1024:.1f} | {j['load_s']:.1f} |")
PY
