#!/usr/bin/env bash
# Checkpoint speed bars of issue 5, measured in one run on the same disk and the same state:
#   (a) training stall per asynchronous save <= 1/10 of torch.save + fsync of the same state;
#   (b) zaya's background write >= 70% of the disk's direct-write bandwidth (dd oflag=direct);
#   (c) zaya's load (read + checksums + assembly) >= 70% of the disk's read bandwidth (dd iflag=direct).
# The state: a model from CONFIG with LAYERS layers, fp32 weights + AdamW moments (>= 2 GB by default).
# dd runs before and after zaya (the machine is shared: both figures are printed, the better one is used).
# usage: bash bench/checkpoint_speed.sh [BUILD_DIR] [DIR on the disk under test] [CONFIG] [LAYERS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
DIR=${2:-runs/checkpoint_speed}
CONFIG=${3:-configs/mid.json}
LAYERS=${4:-3}
ZAYA="$BUILD/zaya"
[ -x "$ZAYA" ] || { echo "checkpoint_speed: $ZAYA not built (bash scripts/build.sh)" >&2; exit 1; }
mkdir -p "$DIR"
OUT="$DIR/results"
mkdir -p "$OUT"

dd_write() {  # bytes -> GB/s of a direct write of that many bytes (16 MiB blocks)
  local count=$(( ($1 + 16777215) / 16777216 ))
  dd if=/dev/zero of="$DIR/dd.bin" bs=16M count="$count" oflag=direct 2>&1 | awk '/copied/ {print $(NF-1), $NF}'
}
dd_read() {
  dd if="$DIR/dd.bin" of=/dev/null bs=16M iflag=direct 2>&1 | awk '/copied/ {print $(NF-1), $NF}'
}

echo "== zaya bench checkpoint (3 asynchronous saves + a verified load)" >&2
"$ZAYA" bench checkpoint --config "$CONFIG" --layers "$LAYERS" --dir "$DIR/ckpt" --saves 3 --keep \
  | tee "$OUT/zaya.json"
BYTES=$(python3 -c "import json; print(json.load(open('$OUT/zaya.json'))['state_bytes'])")
CK=$(python3 -c "import json; print(json.load(open('$OUT/zaya.json'))['checkpoint_dir'])")

echo "== dd: direct write / read of $BYTES bytes" >&2
W1=$(dd_write "$BYTES"); R1=$(dd_read)
echo "== torch.save + fsync of the same tensors" >&2
/usr/bin/python3 tools/reference/torch_save_bench.py --manifest "$CK/manifest.json" --out "$DIR/torch.pt" \
  | tee "$OUT/torch.json"
W2=$(dd_write "$BYTES"); R2=$(dd_read)
rm -f "$DIR/dd.bin"
rm -rf "$DIR/ckpt"
printf '{"dd_write": ["%s", "%s"], "dd_read": ["%s", "%s"]}\n' "$W1" "$W2" "$R1" "$R2" | tee "$OUT/dd.json"

python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
z = json.load(open(f"{out}/zaya.json")); t = json.load(open(f"{out}/torch.json")); d = json.load(open(f"{out}/dd.json"))
def gbps(s):  # "1.5 GB/s" / "997 MB/s" -> GB/s
    v, unit = s.split()
    return float(v) * {"GB/s": 1, "MB/s": 1e-3, "kB/s": 1e-6, "GiB/s": 1.073741824, "MiB/s": 1.048576e-3}[unit]
ddw = max(gbps(x) for x in d["dd_write"]); ddr = max(gbps(x) for x in d["dd_read"])
stall = z["stall_s_max"]; torch_s = t["seconds_min"]
rows = [
    ("state", f'{z["state_bytes"] / 1e9:.2f} GB ({z["params_m"]:.0f} M parameters, fp32 weights + AdamW)', ""),
    ("(a) stall per save (max of 3)", f"{stall:.3f} s vs torch.save+fsync {torch_s:.2f} s (best of {len(t['seconds'])})",
     f"{stall / torch_s:.3f} (bar <= 0.100)"),
    ("(b) background write", f'{z["write_gbps_median"]:.2f} GB/s ({"O_DIRECT" if z["o_direct"] else "buffered"}, '
     f'{z["io_threads"]} streams) vs dd oflag=direct {ddw:.2f} GB/s', f'{z["write_gbps_median"] / ddw:.2f} (bar >= 0.70)'),
    ("(c) load (read+verify+assemble)", f'{z["load_gbps"]:.2f} GB/s vs dd iflag=direct {ddr:.2f} GB/s',
     f'{z["load_gbps"] / ddr:.2f} (bar >= 0.70)'),
]
for name, fig, ratio in rows:
    print(f"{name:34s} {fig:80s} {ratio}")
ok = stall / torch_s <= 0.1 and z["write_gbps_median"] / ddw >= 0.7 and z["load_gbps"] / ddr >= 0.7
print("all bars hold" if ok else "SOME BAR MISSED")
json.dump({"stall_ratio": stall / torch_s, "write_ratio": z["write_gbps_median"] / ddw,
           "load_ratio": z["load_gbps"] / ddr, "ok": ok}, open(f"{out}/summary.json", "w"))
PY
