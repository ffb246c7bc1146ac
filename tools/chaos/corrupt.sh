#!/usr/bin/env bash
# Corruption test of training checkpoints (docs/fault-tolerance.md): trains a tiny run of 10 steps with
# checkpoints at steps 2, 4, ..., 10, then for each corruption — truncate, bit-flip or delete a data file,
# the manifest or the COMPLETE marker — of step 8 in a copy of the run's checkpoints up to step 8 (as if it
# had died after saving step 8), runs `zaya train --resume auto` and checks that the message names the
# broken checkpoint, that the resume falls back to step 6, and that training on to step 10 ends with the
# uninterrupted run's final model bitwise.
#
#   tools/chaos/corrupt.sh BUILD_DIR [--keep]
#
# COMPLETE holds "step 8" and the manifest's xxh3: truncating it or flipping a bit of the checksum must fall
# back; a flipped bit in its "step" line carries no data (every byte of data and the manifest still verify),
# so that case expects the resume to load step 8. A flipped digit in the manifest's saved state (the
# data-loader position) keeps valid JSON: the manifest checksum in COMPLETE must catch it.
# Exit status: 0 when every case behaved as expected; 1 with a line per failed case otherwise.
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [--keep]" >&2; exit 2; }
ZAYA="$(cd "$1" 2>/dev/null && pwd)/zaya"
[ -x "$ZAYA" ] || { echo "corrupt: no zaya binary in '$1'" >&2; exit 2; }
KEEP=0
[ "${2:-}" = "--keep" ] && KEEP=1
W="$(mktemp -d /tmp/zaya_corrupt.XXXXXX)"
cleanup() { if [ "$KEEP" = 1 ]; then echo "corrupt: work directory kept: $W" >&2; else rm -rf "$W"; fi; }
trap cleanup EXIT
log() { echo "corrupt: $*" >&2; }

. "$(dirname "$0")/tiny_run.sh"
tiny_setup "$ZAYA" "$W"
tiny_config "$W" base 10 2
"$ZAYA" train --config "$W/base.json" > "$W/base.log" 2>&1 || { tail -20 "$W/base.log" >&2; exit 1; }
BASE_CK="$W/base/checkpoints"
for s in 02 04 06 08 10; do
  [ -e "$BASE_CK/step_000000$s/COMPLETE" ] || { log "the base run has no checkpoint at step $s"; exit 1; }
done

# Byte offsets inside step 8's manifest / data file, found from the manifest itself.
MANIFEST="$BASE_CK/step_00000008/manifest.json"
# the 8th byte of the first tensor's data (inside the data, never in the alignment padding)
DATA_AT=$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(m["tensors"][0]["offset"] + 7)' "$MANIFEST")
# the last digit of the data-loader position in the saved state (a value a resume would use; the last
# digit so that the flip keeps valid JSON: a leading "0" would not parse)
POS_AT=$(python3 -c '
import re, sys
t = open(sys.argv[1], "rb").read()
m = re.search(rb"\"position\": *([0-9]+)", t)
print(m.end(1) - 1)' "$MANIFEST")
# a hex digit of the first tensor's checksum
XXH_AT=$(python3 -c '
import re, sys
t = open(sys.argv[1], "rb").read()
m = re.search(rb"\"xxh3\": *\"([0-9a-f]+)\"", t)
print(m.start(1) + 3)' "$MANIFEST")
# a byte of the format name
FMT_AT=$(python3 -c 'import sys; t=open(sys.argv[1],"rb").read(); print(t.index(b"zaya-train-checkpoint") + 5)' "$MANIFEST")

flip_bit() {  # FILE OFFSET: flips the lowest bit of that byte
  python3 -c '
import sys
p, at = sys.argv[1], int(sys.argv[2])
b = bytearray(open(p, "rb").read())
b[at] ^= 1
open(p, "wb").write(bytes(b))' "$1" "$2"
}
truncate_half() { truncate -s $(($(stat -c %s "$1") / 2)) "$1"; }

# name | file in step 8 | operation | expected: "fallback" (skip step 8, resume step 6) or "newest"
CASES=(
  "truncate-data|rank_00000.bin|truncate -s -100|fallback"
  "truncate-manifest|manifest.json|truncate_half|fallback"
  "truncate-COMPLETE|COMPLETE|truncate -s 0|fallback"
  "flip-data|rank_00000.bin|flip_bit @ $DATA_AT|fallback"
  "flip-manifest-format|manifest.json|flip_bit @ $FMT_AT|fallback"
  "flip-manifest-checksum|manifest.json|flip_bit @ $XXH_AT|fallback"
  "flip-manifest-state|manifest.json|flip_bit @ $POS_AT|fallback"
  "flip-COMPLETE-step|COMPLETE|flip_bit @ 0|newest"
  "flip-COMPLETE-checksum|COMPLETE|flip_bit @ 25|fallback"
  "delete-data|rank_00000.bin|rm|fallback"
  "delete-manifest|manifest.json|rm|fallback"
  "delete-COMPLETE|COMPLETE|rm|fallback"
)

FAILS=0
printf '%-24s %-14s %-9s %-8s %s\n' case file expected result "message (train: resume: ...)" | tee "$W/table.txt"
for c in "${CASES[@]}"; do
  IFS='|' read -r name file op expect <<< "$c"
  run="case_$name"
  tiny_config "$W" "$run" 10 2
  mkdir -p "$W/$run"
  cp -a "$BASE_CK" "$W/$run/checkpoints"
  rm -r "$W/$run/checkpoints/step_00000010"
  cp "$W/base/metrics.jsonl" "$W/$run/"
  target="$W/$run/checkpoints/step_00000008/$file"
  case "$op" in
    flip_bit*) flip_bit "$target" "${op##*@ }" ;;
    truncate_half) truncate_half "$target" ;;
    "truncate -s -100") truncate -s -100 "$target" ;;
    "truncate -s 0") truncate -s 0 "$target" ;;
    rm) rm "$target" ;;
  esac
  set +e
  "$ZAYA" train --config "$W/$run.json" --resume auto > "$W/$run.log" 2>&1
  rc=$?
  set -e
  out="$W/$run.log"
  newest="$W/$run/checkpoints/step_00000008"
  prev="$W/$run/checkpoints/step_00000006"
  msg=$(grep -m1 "train: resume: skipping" "$out" | sed 's/^train: resume: //' || true)
  why=""
  if [ "$rc" != 0 ]; then
    why="zaya train exited $rc: $(tail -1 "$out")"
  elif [ "$expect" = fallback ]; then
    grep -Eq "train: resume: skipping ${newest}[:/]" "$out" || why="step 8 was not reported as broken"
    [ -z "$why" ] && { grep -q "train: resumed from $prev (step 6)" "$out" || why="did not resume from step 6"; }
  else
    grep -q "train: resume: skipping" "$out" && why="a checkpoint was skipped"
    [ -z "$why" ] && { grep -q "train: resumed from $newest (step 8)" "$out" || why="did not resume from step 8"; }
  fi
  if [ "$rc" = 0 ] && ! cmp -s "$W/base/model/model.safetensors" "$W/$run/model/model.safetensors"; then
    why="${why:+$why; }the final model differs from the uninterrupted run's"
  fi
  if [ -z "$why" ]; then
    result=ok
  else
    result=FAIL
    FAILS=$((FAILS + 1))
  fi
  [ -n "$msg" ] || msg="(nothing skipped) $(grep -m1 -o 'resumed from .*' "$out" || true)"
  printf '%-24s %-14s %-9s %-8s %s\n' "$name" "$file" "$expect" "$result" "$(echo "${msg//$W\//}" | cut -c1-150)" | tee -a "$W/table.txt"
  [ -z "$why" ] || log "FAIL $name: $why (log: $out)"
done

if [ "$FAILS" = 0 ]; then
  log "PASS: all ${#CASES[@]} cases"
else
  log "FAIL: $FAILS of ${#CASES[@]} cases"
  KEEP=1
  exit 1
fi
