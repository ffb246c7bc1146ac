# shellcheck shell=bash
# Sourced by tools/chaos/*.sh: the tiny training setup of tests/tiny_training_data.h built with the CLI.
#   tiny_setup ZAYA DIR              corpus/, tokenizer.json, data.{train,val}.{bin,idx}, model.json in DIR
#   tiny_config DIR NAME STEPS EVERY DIR/NAME.json: a TRAIN.json writing to DIR/NAME, a checkpoint every
#                                    EVERY steps, all of them kept (so that any can be re-verified later)

tiny_setup() {
  local zaya="$1" dir="$2" d i text
  mkdir -p "$dir/corpus"
  local sent=("the cat sat on the mat. " "a dog ran in the park. " "the bird sang a song. "
    "we read the old book. ")
  for d in $(seq 0 11); do
    text=""
    for i in $(seq 0 59); do text+="${sent[$(((i * 7 + d) % 4))]}"; done
    printf '%s' "$text" > "$dir/corpus/doc$d.txt"
  done
  "$zaya" tokenizer train --input "$dir/corpus" --vocab-size 512 --out "$dir/tokenizer.json" \
    > "$dir/setup.log" 2>&1 || { cat "$dir/setup.log" >&2; return 1; }
  "$zaya" data prepare --input "$dir/corpus" --tokenizer "$dir/tokenizer.json" --out "$dir/data" \
    --val-fraction 0.2 --no-progress >> "$dir/setup.log" 2>&1 || { cat "$dir/setup.log" >&2; return 1; }
  cat > "$dir/model.json" <<'JSON'
{"model_type": "zaya", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "moe_intermediate_size": 32,
 "num_experts": 4, "router_hidden_size": 16, "layer_types": ["hybrid", "hybrid_sliding"], "sliding_window": 8,
 "tie_word_embeddings": true, "eos_token_id": 1}
JSON
}

tiny_config() {
  local dir="$1" name="$2" steps="$3" every="$4"
  cat > "$dir/$name.json" <<JSON
{"model": {"config": "$dir/model.json", "seed": 3},
 "data": {"train": "$dir/data.train", "val": "$dir/data.val"},
 "optim": {"lr": 0.01, "schedule": {"kind": "cosine", "warmup_steps": 2}, "balancer": {"rule": "rprop"}},
 "batch": {"micro_batch": 2, "seq_len": 32, "grad_accum": 2}, "steps": $steps, "eval": {"every": 0, "batches": 1},
 "out": "$dir/$name", "save_dtype": "fp32", "sample": {"max_new_tokens": 0},
 "checkpoint": {"every": $every, "keep_last": 100000}}
JSON
}
