#!/usr/bin/env bash
# Data-parallel training speed on one machine: `zaya train` as one process with T threads against
# `mpirun -np T` ranks of one thread each (ZeRO-1; blocking gradient reductions after the backward), and the
# same with --overlap (nonblocking reductions started block by block during the backward), on the same TRAIN.json (same global batch, bf16 GEMMs, AdamW on every
# parameter; OPTIM=muon for the default Muon + AdamW split, whose Newton-Schulz on mid's 256 expert matrices
# of 1024 x 1024, ~8 TFLOP per step, then dominates a small batch; ZeRO-1 splits it between the ranks).
# Prints each run's mean tokens/s over the steps after the first two, the ratio np T / one process, and the
# communication time per step rank 0 was blocked (from summary.json), which says how much of the gradient
# reduction the backward hid: with --overlap the reduction wait after the backward shrinks by that part.
# Needs the Brown data of scripts/main.sh (runs/main/data/brown.train).
#   [ACCUM=micro-batches per step] [OVERLAP=0 skips the --overlap run] bench/dist_speed.sh [BUILD_DIR] [CONFIG]
#   [BATCH] [SEQ] [STEPS] [RANKS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
CONFIG=${2:-configs/mid.json}
B=${3:-4}
S=${4:-256}
STEPS=${5:-8}
T=${6:-2}
DATA=runs/main/data/brown.train
[ -f "$DATA.bin" ] || { echo "dist_speed.sh: $DATA.bin missing (run scripts/main.sh first)" >&2; exit 1; }
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
if [ "${OPTIM:-adamw}" = muon ]; then GROUPS_JSON='{}'
else GROUPS_JSON='{"matrix": {"optimizer": "adamw"}, "expert": {"optimizer": "adamw"}}'; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
write_config() {  # $1 = run name
  cat > "$dir/$1.json" <<EOF
{"model": {"config": "$CONFIG", "seed": 1}, "data": {"train": "$DATA", "seed": 1},
 "optim": {"lr": 0.003, "schedule": {"kind": "constant"}, "balancer": {"rule": "rprop"},
           "groups": $GROUPS_JSON},
 "batch": {"micro_batch": $B, "seq_len": $S, "grad_accum": ${ACCUM:-1}}, "steps": $STEPS, "dtype": "bf16",
 "eval": {"every": 0, "batches": 1}, "out": "$dir/$1", "sample": {"max_new_tokens": 0}}
EOF
}
for run in single blocking overlap; do write_config $run; done
echo "== one process, $T threads" >&2
OMP_NUM_THREADS=$T "$BUILD/zaya" train --config "$dir/single.json" 2>&1 | { grep -E "^train:|^step|error" >&2 || true; }
# One core per rank: --bind-to core --map-by core (the default for <= 2 ranks); each rank's OpenMP pool is
# OMP_NUM_THREADS=1. With more threads per rank: --map-by slot:PE=<threads> --bind-to core.
echo "== mpirun -np $T, 1 thread each" >&2
mpirun -np "$T" --bind-to core --map-by core -x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY \
  "$BUILD/zaya" train --config "$dir/blocking.json" 2>&1 | { grep -E "^train:|^step|error" >&2 || true; }
echo "== mpirun -np $T, 1 thread each, --overlap" >&2
[ "${OVERLAP:-1}" = 0 ] || mpirun -np "$T" --bind-to core --map-by core -x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY \
  "$BUILD/zaya" train --config "$dir/overlap.json" --overlap 2>&1 | { grep -E "^train:|^step|error" >&2 || true; }
/usr/bin/python3 - "$dir" "$T" "$CONFIG" "$B" "$S" <<'PY'
import json, sys, os
d, T, cfg, B, S = sys.argv[1:]
def tps(run):
    rows = [json.loads(l) for l in open(os.path.join(d, run, "metrics.jsonl"))]
    later = rows[2:] if len(rows) > 2 else rows
    return sum(r["tokens_per_s"] for r in later) / len(later)
def comm(run):
    return json.load(open(os.path.join(d, run, "summary.json"))).get("comm_ms_per_step", {})
one, bl = tps("single"), tps("blocking")
ov = tps("overlap") if os.path.exists(os.path.join(d, "overlap", "metrics.jsonl")) else float("nan")
print(f"| run ({cfg}, {B} x {S} global x {os.environ.get('ACCUM', '1')} micro-batches, bf16) | tokens/s | vs one process |")
print("| --- | --- | --- |")
print(f"| 1 process x {T} threads | {one:.0f} | 1.00 |")
print(f"| mpirun -np {T} x 1 thread | {bl:.0f} | {bl / one:.2f} |")
print(f"| mpirun -np {T} x 1 thread, --overlap | {ov:.0f} | {ov / one:.2f} |")
for run in ("blocking", "overlap"):
    if not os.path.exists(os.path.join(d, run, "summary.json")): continue
    c = comm(run)
    print(f"{run}: rank-0 communication per step (ms): " + ", ".join(f"{k} {v:.1f}" for k, v in c.items()))
PY
