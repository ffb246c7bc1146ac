#!/usr/bin/env bash
# The main job's training in bf16 and in fp32, same data, seed and steps (no time limit), then the two loss
# curves compared (tools/train/compare_runs.py: the moving-averaged training loss and every validation loss,
# largest relative deviation) and plotted. Needs the main job's data (bash scripts/main.sh prepares it).
#   tools/train/bf16_vs_fp32.sh [BUILD_DIR] [TRAIN_CONFIG] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
CONFIG=${2:-configs/train-brown.json}
OUT=${3:-runs/bf16_vs_fp32}
mkdir -p "$OUT"
for dt in fp32 bf16; do
  /usr/bin/python3 - "$CONFIG" "$OUT/$dt" "$dt" > "$OUT/$dt.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["out"], c["dtype"], c["max_minutes"] = sys.argv[2], sys.argv[3], 0
c.pop("sample", None)
print(json.dumps(c, indent=1))
PY
  echo "== $dt"
  "$BUILD/zaya" train --config "$OUT/$dt.json" --overwrite 2>&1 | grep -E "^train:|step +[0-9]+0/" || true
done
/usr/bin/python3 tools/train/compare_runs.py "$OUT/fp32/metrics.jsonl" "$OUT/bf16/metrics.jsonl" \
  "$OUT/bf16_vs_fp32.png" | tee "$OUT/summary.json"
echo "plot: $OUT/bf16_vs_fp32.png"
