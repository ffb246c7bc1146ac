#!/usr/bin/env bash
# Chaos test of `zaya launch` + checkpoints (docs/fault-tolerance.md): SIGKILL the training process(es) at
# KILLS random moments (during steps, during background checkpoint writes, during commits) under
# `zaya launch`, then check that the final parameters equal an uninterrupted run's bitwise and that no
# corrupt checkpoint was ever loaded.
#
#   tools/chaos/chaos.sh BUILD_DIR [KILLS=20] [SEED=1] [--np N] [--keep]
#
#   BUILD_DIR  holds the `zaya` binary
#   --np N     run both the reference and the chaos run under `mpirun -np N` (one thread per rank)
#   --keep     keep the work directory (printed) instead of removing it
# Environment: CHAOS_STEP_MS (default 60) slows every step down (ZAYA_SLOW_STEP_MS) so that kills land
# inside steps; CHAOS_STEPS (default 3 * KILLS + 10) training steps; CHAOS_EVERY (default 2) checkpoint.every.
#
# Each kill waits for the current attempt to run, then picks one of three moments (seeded):
#   random   a uniformly random delay (0..799 ms) after the attempt's first heartbeat
#   save     a short random delay (0..40 ms) after a "saving" heartbeat (a background write in flight)
#   commit   as soon as the heartbeat says "committing" (rank 0 writing manifest + COMPLETE)
# and classifies the kill by the heartbeat phase read just before the SIGKILL: startup (no heartbeat yet:
# loading / resuming), step (started / step / saved: a step running, no save in flight), save (saving),
# commit (committing). After each kill, before the restart, it records whether the newest step directory
# was left without its COMPLETE marker.
# Exit status: 0 when every figure is as required (all kills done, bitwise equal, nothing corrupt loaded).
set -euo pipefail

usage() {
  echo "usage: $0 BUILD_DIR [KILLS=20] [SEED=1] [--np N] [--keep]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
POS=()
NP=1
KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --np) NP="${2:?--np needs a number}"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) usage ;;
    *) POS+=("$1"); shift ;;
  esac
done
BUILD="${POS[0]:-}"
KILLS="${POS[1]:-20}"
SEED="${POS[2]:-1}"
ZAYA="$(cd "$BUILD" 2>/dev/null && pwd)/zaya"
[ -x "$ZAYA" ] || { echo "chaos: no zaya binary in '$BUILD'" >&2; exit 2; }
[[ "$KILLS" =~ ^[0-9]+$ && "$SEED" =~ ^[0-9]+$ && "$NP" =~ ^[0-9]+$ ]] || usage
STEP_MS="${CHAOS_STEP_MS:-60}"
STEPS="${CHAOS_STEPS:-$((3 * KILLS + 10))}"
EVERY="${CHAOS_EVERY:-2}"
RANDOM="$SEED"

W="$(mktemp -d /tmp/zaya_chaos.XXXXXX)"
LAUNCHER_PID=""
cleanup() {
  [ -n "$LAUNCHER_PID" ] && kill "$LAUNCHER_PID" 2>/dev/null || true
  if [ "$KEEP" = 1 ]; then echo "chaos: work directory kept: $W" >&2; else rm -rf "$W"; fi
}
trap cleanup EXIT
log() { echo "chaos: $*" >&2; }
now_ms() { date +%s%3N; }

# ---- the tiny run (as tests/tiny_training_data.h) ----
. "$(dirname "$0")/tiny_run.sh"
tiny_setup "$ZAYA" "$W"
tiny_config "$W" reference "$STEPS" "$EVERY"
tiny_config "$W" chaos "$STEPS" "$EVERY"

TRAIN_PREFIX=()
if [ "$NP" -gt 1 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
  TRAIN_PREFIX=(mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS -x ZAYA_SLOW_STEP_MS
    -x ZAYA_HEARTBEAT_FILE -np "$NP")
fi

# ---- the reference: uninterrupted ----
log "work directory $W; $STEPS steps, checkpoint every $EVERY, $NP rank(s), $KILLS kills, seed $SEED"
t0=$(now_ms)
"${TRAIN_PREFIX[@]}" "$ZAYA" train --config "$W/reference.json" > "$W/reference.log" 2>&1 ||
  { log "the reference run failed:"; tail -20 "$W/reference.log" >&2; exit 1; }
REF_S=$(( ($(now_ms) - t0) ))
log "reference run: $((REF_S / 1000)).$(printf %03d $((REF_S % 1000))) s"

# ---- the chaos run under zaya launch ----
HB="$W/heartbeat"
export ZAYA_SLOW_STEP_MS="$STEP_MS"
t0=$(now_ms)
"$ZAYA" launch --max-restarts $((KILLS + 5)) --backoff 0.3 --max-backoff 1 --heartbeat-timeout 120 \
  --startup-timeout 300 --kill-grace 5 --heartbeat-file "$HB" --report "$W/launch.json" -- \
  "${TRAIN_PREFIX[@]}" "$ZAYA" train --config "$W/chaos.json" --resume auto > "$W/launch.log" 2>&1 &
LAUNCHER_PID=$!

# The `zaya train` processes under the launcher (descendants whose command line is `.../zaya train ...`).
train_pids() {
  ps -eo pid=,ppid=,args= | awk -v root="$LAUNCHER_PID" '
    { pid[NR] = $1; ppid[NR] = $2; $1 = ""; $2 = ""; args[NR] = $0 }
    END {
      inside[root] = 1
      for (changed = 1; changed; ) {
        changed = 0
        for (i = 1; i <= NR; i++) if (!(pid[i] in inside) && (ppid[i] in inside)) { inside[pid[i]] = 1; changed = 1 }
      }
      for (i = 1; i <= NR; i++)
        if (pid[i] != root && (pid[i] in inside) && args[i] ~ /zaya train / && args[i] !~ /mpirun/) print pid[i]
    }'
}
launcher_alive() { kill -0 "$LAUNCHER_PID" 2>/dev/null; }
heartbeat() { local l=""; read -r l 2>/dev/null < "$HB" || true; echo "$l"; }
phase_of() {  # heartbeat content -> startup | step | save | commit
  case "$1" in
    "") echo startup ;;
    *" saving") echo save ;;
    *" committing") echo commit ;;
    *) echo step ;;
  esac
}
# The newest step directory under the chaos run's checkpoints and whether it has COMPLETE.
newest_ckpt_state() {
  local d
  d=$(ls -d "$W/chaos/checkpoints"/step_* 2>/dev/null | sort | tail -1 || true)
  [ -z "$d" ] && { echo "none"; return; }
  if [ -e "$d/COMPLETE" ]; then echo "$(basename "$d") complete"; else echo "$(basename "$d") INCOMPLETE"; fi
}

printf 'kill\tmode\tphase\theartbeat\tat_ms\tpids\tnewest_after\n' > "$W/kills.tsv"
declare -A PER_PHASE=([startup]=0 [step]=0 [save]=0 [commit]=0)
declare -A PER_MODE=([random]=0 [save]=0 [commit]=0)
KILLED=0
INCOMPLETE_LEFT=0
for k in $(seq 1 "$KILLS"); do
  # Wait for a running attempt (training processes present).
  pids=""
  while launcher_alive; do
    pids=$(train_pids | tr '\n' ' ')
    [ -n "$pids" ] && break
    sleep 0.02
  done
  launcher_alive || break
  pids=$(train_pids | tr '\n' ' ')
  [ -n "$pids" ] || { sleep 0.05; pids=$(train_pids | tr '\n' ' '); }
  [ -n "$pids" ] || continue
  case $((RANDOM % 3)) in
    0) mode=random ;;
    1) mode=save ;;
    2) mode=commit ;;
  esac
  case $mode in
    random)  # this attempt's first heartbeat (loaded, resumed), then 0..799 ms
      while launcher_alive && [ -z "$(heartbeat)" ]; do sleep 0.005; done
      sleep "0.$(printf %03d $((RANDOM % 800)))" ;;
    save)  # the next "saving" heartbeat of this attempt, then 0..40 ms
      deadline=$(( $(now_ms) + 20000 ))
      before=$(heartbeat)
      while launcher_alive && [ "$(now_ms)" -lt "$deadline" ]; do
        hb=$(heartbeat)
        [[ "$hb" == *" saving" && "$hb" != "$before" ]] && break
        sleep 0.002
      done
      sleep "0.0$(printf %02d $((RANDOM % 41)))" ;;
    commit)  # spin on the heartbeat until it says "committing" (the commit takes milliseconds)
      deadline=$(( $(now_ms) + 20000 ))
      spins=0
      while :; do
        hb=""
        read -r hb 2>/dev/null < "$HB" || true
        [[ "$hb" == *" committing" ]] && break
        spins=$((spins + 1))
        if [ $((spins % 2000)) = 0 ]; then  # now and then: still running, not past the deadline?
          launcher_alive && [ "$(now_ms)" -lt "$deadline" ] || break
        fi
      done ;;
  esac
  # Kill the processes found above at once (looking them up again would take tens of ms and miss the
  # commit); any that ended meanwhile are simply gone.
  [ "$mode" = commit ] || hb=$(heartbeat)  # (commit: the content just read; no fork before the kill)
  killed_any=0
  for p in $pids; do kill -KILL "$p" 2>/dev/null && killed_any=1; done
  at=$(( $(now_ms) - t0 ))
  [ "$killed_any" = 1 ] || { log "kill $k: the training processes had ended"; continue; }
  phase=$(phase_of "$hb")
  # Let the processes die (and mpirun notice), then look at the disk before the restart (backoff 0.3 s).
  for _ in $(seq 1 50); do
    alive=0
    for p in $pids; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.01
  done
  state=$(newest_ckpt_state)
  [[ "$state" == *INCOMPLETE ]] && INCOMPLETE_LEFT=$((INCOMPLETE_LEFT + 1))
  KILLED=$((KILLED + 1))
  PER_PHASE[$phase]=$((PER_PHASE[$phase] + 1))
  PER_MODE[$mode]=$((PER_MODE[$mode] + 1))
  printf '%d\t%s\t%s\t%s\t%d\t%s\t%s\n' "$k" "$mode" "$phase" "$hb" "$at" "$pids" "$state" >> "$W/kills.tsv"
  log "kill $k ($mode) at $at ms: heartbeat '$hb' -> $phase; pids $pids; newest checkpoint after: $state"
  # Wait for the killed processes to be replaced before the next kill.
  while launcher_alive; do
    new=$(train_pids | tr '\n' ' ')
    [ -n "$new" ] && [ "$new" != "$pids" ] && break
    sleep 0.02
  done
done

set +e
wait "$LAUNCHER_PID"
LAUNCH_RC=$?
set -e
LAUNCHER_PID=""
CHAOS_MS=$(( $(now_ms) - t0 ))

# ---- the figures ----
RESTARTS=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["restarts"])' "$W/launch.json" 2>/dev/null || echo "?")
SKIPPED=$(grep -c "train: resume: skipping" "$W/launch.log" || true)
SKIPPED_INCOMPLETE=$(grep "train: resume: skipping" "$W/launch.log" | grep -c "no COMPLETE" || true)
SKIPPED_OTHER=$((SKIPPED - SKIPPED_INCOMPLETE))
# Every checkpoint a restart loaded: re-verified now (zaya export reads and checks every checksum).
LOADED=0
LOADED_OK=0
while read -r dir; do
  LOADED=$((LOADED + 1))
  if "$ZAYA" export --checkpoint "$dir" --out "$W/verify_export" --dtype fp32 > "$W/verify.log" 2>&1; then
    LOADED_OK=$((LOADED_OK + 1))
  else
    log "loaded checkpoint $dir does not verify now:"; cat "$W/verify.log" >&2
  fi
  rm -rf "$W/verify_export"
done < <(grep -o "train: resumed from [^ ]*" "$W/launch.log" | awk '{print $4}')
LOADED_CORRUPT=$((LOADED - LOADED_OK))
# Every checkpoint left, rank files compared with the reference's checkpoint of the same step.
CKPT_TOTAL=0
CKPT_SAME=0
for d in "$W/chaos/checkpoints"/step_*; do
  [ -e "$d/COMPLETE" ] || continue
  CKPT_TOTAL=$((CKPT_TOTAL + 1))
  same=1
  for f in "$d"/rank_*.bin; do
    cmp -s "$f" "$W/reference/checkpoints/$(basename "$d")/$(basename "$f")" || same=0
  done
  CKPT_SAME=$((CKPT_SAME + same))
done
BITWISE=no
cmp -s "$W/reference/model/model.safetensors" "$W/chaos/model/model.safetensors" && BITWISE=yes

secs() { printf '%d.%01d' $(($1 / 1000)) $((($1 % 1000) / 100)); }
{
  echo "chaos figures ($NP rank(s), $STEPS steps, checkpoint every $EVERY, steps slowed by $STEP_MS ms, seed $SEED)"
  printf '  %-46s %s\n' "kills (SIGKILL of every zaya train process)" "$KILLED of $KILLS"
  printf '  %-46s %s\n' "  by phase: startup / step / save / commit" \
    "${PER_PHASE[startup]} / ${PER_PHASE[step]} / ${PER_PHASE[save]} / ${PER_PHASE[commit]}"
  printf '  %-46s %s\n' "  by moment chosen: random / save / commit" \
    "${PER_MODE[random]} / ${PER_MODE[save]} / ${PER_MODE[commit]}"
  printf '  %-46s %s\n' "kills that left the newest checkpoint partial" "$INCOMPLETE_LEFT"
  printf '  %-46s %s\n' "restarts by zaya launch" "$RESTARTS (launch exit code $LAUNCH_RC)"
  printf '  %-46s %s\n' "broken checkpoints detected and skipped" \
    "$SKIPPED ($SKIPPED_INCOMPLETE incomplete, $SKIPPED_OTHER corrupt)"
  printf '  %-46s %s\n' "checkpoints loaded by restarts / re-verified" "$LOADED / $LOADED_OK (corrupt loaded: $LOADED_CORRUPT)"
  printf '  %-46s %s\n' "checkpoints left equal to the reference's" "$CKPT_SAME of $CKPT_TOTAL"
  printf '  %-46s %s\n' "final parameters bitwise equal to reference" "$BITWISE"
  printf '  %-46s %s\n' "wall time: reference / chaos run" "$(secs "$REF_S") s / $(secs "$CHAOS_MS") s"
} | tee "$W/figures.txt"
cat > "$W/figures.json" <<EOF
{"np": $NP, "steps": $STEPS, "every": $EVERY, "step_ms": $STEP_MS, "seed": $SEED, "kills": $KILLED,
 "kills_requested": $KILLS,
 "by_phase": {"startup": ${PER_PHASE[startup]}, "step": ${PER_PHASE[step]}, "save": ${PER_PHASE[save]}, "commit": ${PER_PHASE[commit]}},
 "left_partial": $INCOMPLETE_LEFT, "restarts": "$RESTARTS", "launch_exit_code": $LAUNCH_RC,
 "skipped": $SKIPPED, "skipped_incomplete": $SKIPPED_INCOMPLETE, "skipped_corrupt": $SKIPPED_OTHER,
 "loaded": $LOADED, "loaded_corrupt": $LOADED_CORRUPT, "checkpoints_equal": $CKPT_SAME, "checkpoints": $CKPT_TOTAL,
 "bitwise_equal": "$BITWISE", "reference_s": $(secs "$REF_S"), "chaos_s": $(secs "$CHAOS_MS")}
EOF
[ -n "${CHAOS_FIGURES:-}" ] && cp "$W/figures.json" "$CHAOS_FIGURES"

ok=1
[ "$KILLED" = "$KILLS" ] || { log "FAIL: only $KILLED of $KILLS kills happened (the run ended first: raise CHAOS_STEPS)"; ok=0; }
[ "$LAUNCH_RC" = 0 ] || { log "FAIL: zaya launch exited $LAUNCH_RC"; tail -30 "$W/launch.log" >&2; ok=0; }
[ "$BITWISE" = yes ] || { log "FAIL: the final model differs from the reference"; ok=0; }
[ "$LOADED_CORRUPT" = 0 ] || { log "FAIL: $LOADED_CORRUPT loaded checkpoint(s) do not verify"; ok=0; }
[ "$CKPT_SAME" = "$CKPT_TOTAL" ] || { log "FAIL: checkpoints differ from the reference's"; ok=0; }
[ "$ok" = 1 ] && log "PASS" || { KEEP=1; exit 1; }
