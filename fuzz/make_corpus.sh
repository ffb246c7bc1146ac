#!/usr/bin/env bash
# Regenerates the fuzz seed corpus (fuzz/corpus/<target>/) and the checkpoint fixture (fuzz/fixtures/) from
# real files: the repository's configs and test data, and the outputs of a Release `zaya` (a BPE tokenizer,
# prepared .bin/.idx shards, a 2-step training run of a micro ZAYA1 and its checkpoint, a sharded init).
# Run it only to refresh the committed corpus (the run id inside the manifest is random, so the files
# change); the suite reads the committed files.
#   bash fuzz/make_corpus.sh [BUILD_DIR]   (default build; needs node_modules from scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
ZAYA="$ROOT/${1:-build}/zaya"
C="$ROOT/fuzz/corpus"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$C"/{safetensors_fuzz,tokenizer_fuzz,data_fuzz,model_json_fuzz,optim_config_fuzz,train_config_fuzz} \
  "$C"/checkpoint_manifest_fuzz "$ROOT/fuzz/fixtures/checkpoint" "$C"/quant_checkpoint_fuzz "$ROOT/fuzz/fixtures/quant"

# Text: the first three Brown documents; a 300-token byte-level BPE tokenizer trained on the first.
node tools/data/brown.mjs "$T/brown" 3 2>/dev/null
"$ZAYA" tokenizer train --input "$T/brown/ca01.txt" --vocab-size 300 --out "$T/tok300.json" >/dev/null

# The micro model (hidden 16, 1 layer, 2 experts, vocab 300: 7,337 parameters) trained 2 steps, checkpoint
# every step. Its TRAIN.json names the model config by its path in the repository (train_config_fuzz runs in
# the source tree, so this TRAIN.json parses all the way through).
MICRO=fuzz/corpus/model_json_fuzz/micro_config.json
cat >"$ROOT/$MICRO" <<'EOF'
{
  "architectures": ["ZayaForCausalLM"], "model_type": "zaya",
  "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
  "moe_intermediate_size": 8, "num_experts": 2, "num_experts_per_tok": 1, "router_hidden_size": 8,
  "rms_norm_eps": 1e-05, "hidden_act": "silu", "cca_time0": 2, "cca_time1": 2,
  "layer_types": ["hybrid"],
  "rope_parameters": {"hybrid": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}},
  "sliding_window": null, "attention_bias": false, "lm_head_bias": false, "tie_word_embeddings": true,
  "vocab_size": 300, "max_position_embeddings": 64, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
  "initializer_range": 0.02
}
EOF
mkdir -p "$T/d"
"$ZAYA" data prepare --input "$T/brown/ca01.txt" --tokenizer "$T/tok300.json" --out "$T/d/brown" \
  --no-progress >/dev/null
cat >"$C/train_config_fuzz/micro-2-steps.json" <<EOF
{
  "comment": "a 2-step run of a micro ZAYA1 (fuzz/make_corpus.sh): its checkpoint manifest is in fuzz/corpus/checkpoint_manifest_fuzz",
  "model": {"config": "$MICRO", "seed": 1},
  "data": {"train": "runs/fuzz-corpus/d/brown.train", "seed": 1},
  "tokenizer": "runs/fuzz-corpus/tok300.json",
  "optim": {"lr": 0.003, "schedule": {"kind": "cosine", "warmup_steps": 1}, "balancer": {"rule": "rprop"}},
  "batch": {"micro_batch": 2, "seq_len": 16, "grad_accum": 1},
  "steps": 2,
  "dtype": "fp32",
  "eval": {"every": 0, "batches": 1},
  "out": "runs/fuzz-corpus/run",
  "checkpoint": {"every": 1, "keep_last": 2},
  "fault": {"max_bad_steps": 3, "spike_zscore": 4, "spike_window": 8},
  "sample": {"prompt": "The", "max_new_tokens": 4, "temperature": 0.7, "top_k": 5}
}
EOF
# Run it from a copy of the paths it names (runs/fuzz-corpus inside $T, the model config from the repo).
mkdir -p "$T/cwd/runs/fuzz-corpus" "$T/cwd/$(dirname $MICRO)"
cp "$ROOT/$MICRO" "$T/cwd/$MICRO"
cp -r "$T/d" "$T/tok300.json" "$T/cwd/runs/fuzz-corpus/"
(cd "$T/cwd" && "$ZAYA" train --config "$C/train_config_fuzz/micro-2-steps.json" >/dev/null 2>&1)
STEP="$T/cwd/runs/fuzz-corpus/run/checkpoints/step_00000002"
cp "$STEP/manifest.json" "$C/checkpoint_manifest_fuzz/manifest-micro-step2.json"
cp "$STEP/rank_00000.bin" "$ROOT/fuzz/fixtures/checkpoint/rank_00000.bin"

# safetensors: the trained micro model (bf16), a sharded init's index and second shard, the optimizer test
# data's AdamW reference file.
MODEL="$T/cwd/runs/fuzz-corpus/run/model"
cp "$MODEL/model.safetensors" "$C/safetensors_fuzz/micro-trained-bf16.safetensors"
"$ZAYA" init --config "$ROOT/$MICRO" --out "$T/shard" --max-shard-gb 0.00001 --dtype fp32 >/dev/null 2>&1
cp "$T/shard/model.safetensors.index.json" "$C/safetensors_fuzz/micro-init.index.json"
cp "$T/shard/model-00003-of-00003.safetensors" "$C/safetensors_fuzz/micro-init-shard3-f32.safetensors"
cp tests/data/optim/adamw.safetensors "$C/safetensors_fuzz/optim-adamw.safetensors"

# Model JSON: native, legacy and trained configs; INPUTS.json files.
cp tests/data/golden/zaya1_like/config.json "$C/model_json_fuzz/golden-config.json"
cp tests/data/ref_legacy_8b/config.json "$C/model_json_fuzz/legacy-8b-config.json"
cp tests/data/ref_legacy_base/config.json "$C/model_json_fuzz/legacy-base-config.json"
cp tests/data/ref_sliding_bias/config.json "$C/model_json_fuzz/sliding-bias-config.json"
cp configs/zaya1-8b.json "$C/model_json_fuzz/zaya1-8b.json"
cp "$MODEL/config.json" "$C/model_json_fuzz/micro-trained-config.json"
cp tests/data/golden/zaya1_like/inputs.json "$C/model_json_fuzz/golden-inputs.json"
cp tests/data/ref_legacy_8b/inputs_legacy.json "$C/model_json_fuzz/legacy-inputs.json"

# TRAIN.json files and optimizer sections (the reference trajectories' configs).
cp configs/train-brown.json configs/train-tiny.json "$C/train_config_fuzz/"
for f in configs/train-brown.json configs/train-tiny.json tests/data/train_traj/zaya1_split.json \
  tests/data/train_traj/adamw_accum2.json; do
  node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
           process.stdout.write(JSON.stringify(j.optim || j.config, null, 1) + "\n")' "$f" \
    >"$C/optim_config_fuzz/$(basename "$f" .json)-optim.json"
done

# Tokenizer: the first byte picks the mode (even: a tokenizer.json follows; odd: text follows).
{ printf '\0'; cat "$T/tok300.json"; } >"$C/tokenizer_fuzz/json-bpe300.bin"
node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
         process.stdout.write("\x01" + j.cases.map((c) => c.text).join("\n").slice(0, 3000))' \
  tests/data/golden/tokenizer_cases.json >"$C/tokenizer_fuzz/text-golden-cases.bin"
{ printf '\3'; head -c 1500 "$T/brown/ca02.txt"; } >"$C/tokenizer_fuzz/text-brown.bin"

# Data: a prepared shard small enough for the target's 64-byte data file (16 int32 tokens), a text and a
# JSONL corpus.
printf 'The jury\n\nIt was won\n' >"$T/two.txt"
mkdir -p "$T/tiny"
"$ZAYA" data prepare --input "$T/two.txt" --tokenizer "$T/tok300.json" --out "$T/tiny/two" \
  --text-doc-split paragraph --no-progress >/dev/null
cp "$T/tiny/two.train.idx" "$C/data_fuzz/two-docs.idx"
cp "$T/tiny/two.train.bin" "$C/data_fuzz/two-docs.bin"
head -c 1200 "$T/brown/ca03.txt" >"$C/data_fuzz/brown-ca03.txt"
node -e 'const t = require("fs").readFileSync(process.argv[1], "utf8").slice(0, 900).split(/\n\s*\n/);
         process.stdout.write(t.map((s) => JSON.stringify({text: s.trim(), source: "ca01"})).join("\n") + "\n")' \
  "$T/brown/ca01.txt" >"$C/data_fuzz/brown-ca01.jsonl"

# Quantized checkpoints: a micro ZAYA1 whose matrices are whole blocks of 32 (hidden 32, 2 experts of 32,
# vocab 64) quantized by `zaya quantize` three ways. The fixture keeps each config.json (its
# quantization_config); the corpus file is the target's selector byte followed by model.safetensors.
cat >"$T/micro32.json" <<'EOF'
{
  "architectures": ["ZayaForCausalLM"], "model_type": "zaya",
  "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
  "moe_intermediate_size": 32, "num_experts": 2, "num_experts_per_tok": 1, "router_hidden_size": 8,
  "rms_norm_eps": 1e-05, "hidden_act": "silu", "cca_time0": 2, "cca_time1": 2,
  "layer_types": ["hybrid"],
  "rope_parameters": {"hybrid": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}},
  "sliding_window": null, "attention_bias": false, "lm_head_bias": false, "tie_word_embeddings": true,
  "vocab_size": 64, "max_position_embeddings": 64, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
  "initializer_range": 0.02
}
EOF
"$ZAYA" init --config "$T/micro32.json" --out "$T/micro32" --dtype bf16 --seed 1 >/dev/null
i=0
for q in "q8_0-all q8_0 all" "mxfp4-experts mxfp4 experts" "fp8-experts fp8 experts"; do
  set -- $q
  "$ZAYA" quantize --model "$T/micro32" --out "$T/q-$1" --scheme "$2" --what "$3" >/dev/null
  cp "$T/q-$1/config.json" "$ROOT/fuzz/fixtures/quant/$1.config.json"
  cp "$T/q-$1/config.json" "$C/model_json_fuzz/$1-config.json"
  { printf "\\$i"; cat "$T/q-$1/model.safetensors"; } >"$C/quant_checkpoint_fuzz/$1.bin"
  i=$((i + 1))
done

du -sh "$C" "$ROOT/fuzz/fixtures"
