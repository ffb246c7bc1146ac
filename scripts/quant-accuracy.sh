#!/bin/bash
# Accuracy of each quantized format against bf16 (docs/quantization.md, "Accuracy"): token perplexity on
# held-out text (zaya eval ppl: lm-eval rolling windows) and greedy-token agreement over 4 prompts x 256
# generated tokens, position by position.
#
#   scripts/quant-accuracy.sh MODEL VAL_TEXT OUT_DIR [CONTEXT]
#   scripts/quant-accuracy.sh runs/main/train/model runs/main/data/brown.val runs/quant 128
set -euo pipefail
model=$1 val=$2 out=$3 ctx=${4:-128}
Z=${ZAYA:-build/zaya}
mkdir -p "$out"
prompts=("The president said that" "In the morning, the jury" "She looked at the letter and" "The church was")
variants=(bf16 q8_0-all q8_0-experts fp8-experts mxfp4-experts mxfp4-all)
for v in "${variants[@]}"; do
  dir=$model
  if [ "$v" != bf16 ]; then
    dir=$out/$(basename "$model")-$v
    [ -f "$dir/config.json" ] || $Z quantize --model "$model" --out "$dir" --scheme "${v%-*}" --what "${v#*-}" \
      --overwrite >/dev/null
  fi
  $Z eval ppl --model "$dir" --input "$val" --context "$ctx" --dtype bf16 2>/dev/null > "$out/ppl-$v.json"
  : > "$out/gen-$v.txt"
  for p in "${prompts[@]}"; do
    $Z generate --model "$dir" --prompt "$p" --max-new-tokens 256 --greedy --ignore-eos --dtype bf16 --json \
      2>/dev/null | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["new_tokens"][0]))' \
      >> "$out/gen-$v.txt"
  done
done
python3 - "$out" "${variants[@]}" <<'PY'
import json, sys
out, variants = sys.argv[1], sys.argv[2:]
base_ppl = json.load(open(f"{out}/ppl-bf16.json"))["token_perplexity"]
base = [json.loads(l) for l in open(f"{out}/gen-bf16.txt")]
print("| weights | token perplexity | vs bf16 | bits per byte | greedy tokens equal to bf16 |")
print("| --- | --- | --- | --- | --- |")
for v in variants:
    j = json.load(open(f"{out}/ppl-{v}.json"))
    gen = [json.loads(l) for l in open(f"{out}/gen-{v}.txt")]
    same = sum(a == b for g, h in zip(gen, base) for a, b in zip(g, h))
    total = sum(len(h) for h in base)
    rel = (j["token_perplexity"] / base_ppl - 1) * 100
    print(f"| {v} | {j['token_perplexity']:.3f} | {rel:+.3f}% | {j['bits_per_byte']:.4f} | {same} / {total} |")
PY
