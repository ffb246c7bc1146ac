#!/usr/bin/env bash
# The sanitizer build: ASan + UBSan (fatal) + coverage-guided fuzzing, in its own folder build-asan/.
# Builds only the fuzz targets and the test binaries that hold the malformed-input / parser tests, runs the
# tests (filtered to those) and every fuzz target for a time budget, and fails if anything reports.
# Idempotent; installs nothing beyond scripts/setup.sh. CI runs it after scripts/test.sh (.ci/run).
#   bash scripts/sanitize.sh   (FUZZ_SECONDS=S per fuzz target, default 30; JOBS=N build jobs, default nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
T0=$(date +%s)
bash scripts/setup.sh ${ZAYA_SETUP_ARGS:-}
JOBS="${JOBS:-$(nproc)}"
FUZZ_SECONDS="${FUZZ_SECONDS:-30}"
B=build-asan

FUZZ_TARGETS=(safetensors_fuzz tokenizer_fuzz data_fuzz model_json_fuzz optim_config_fuzz train_config_fuzz
  checkpoint_manifest_fuzz jinja_fuzz openai_request_fuzz quant_checkpoint_fuzz
  chat_output_fuzz eval_tasks_fuzz)
# The tests that feed malformed input to a parser, per binary (gtest filters; whole binaries would take too
# long under ASan: most of their time is training runs). No test that runs the zaya binary (cli_test, the
# *Command tests): the sanitizer build has none (tests/CMakeLists.txt), to keep its build short.
declare -A TESTS=(
  [safetensors_test]='*'
  [tokenizer_test]='TokenizerLoad.*:TokenizerPieces.*:GemmaTokenizer.InvalidUtf8MatchesReference:GemmaTokenizer.StreamDecoderMatchesDecode'
  [config_test]='*'
  [data_test]='IndexedDataset.*:Prepare.*:Loader.RejectsEmptyDataset'
  [checkpoint_test]='Checkpoint.ShardsAssembleAndMalformedManifestsAreErrors:Checkpoint.RetentionKeepsLastKAndEveryMth'
  [train_test]='*'
  [optim_test]='OptimConfigJson.*:ParamGroups.*:Balancer.StateRoundTrip'
  [bad_steps_test]='*'
  [jinja_test]='*'
  [openai_request_test]='*'
  [chat_output_test]='*'
  # A real server on loopback: malformed HTTP and bodies on raw sockets, errors, a dropped stream. Not the soak
  # (ASan's quarantine grows the resident set it bounds) nor the tests that run the zaya binary.
  # Quantized formats, kernels (AVX-512 intrinsics, masked tails) and the loader on malformed files; not the
  # test that runs `zaya quantize`.
  [quant_test]='*'
  [eval_test]='*'
  # lm-eval task files (malformed JSONL among them), the request split, metrics; scoring with shared contexts.
  [eval_tasks_test]='*'
  [eval_run_test]='EvalScore.*:EvalCloze.ItemsFollowTheText'
  [quant_checkpoint_test]='QuantCheckpoint.LoadsReferenceFilesBitExact:QuantCheckpoint.ForwardEqualsDequantizedModel:QuantCheckpoint.MalformedFilesAreClearErrors'
  [thread_pool_test]='*'
  [server_test]='Server.MalformedRequests:Server.RoutesAndErrors:Server.ApiKeyAndBodyLimit:Server.DisconnectFreesSlot:Server.ChatStreamsAndReusesState:Server.FullQueueAnswers503'
)
TEST_BINARIES=(safetensors_test tokenizer_test config_test data_test checkpoint_test train_test optim_test
  bad_steps_test jinja_test openai_request_test chat_output_test quant_test quant_checkpoint_test eval_test
  eval_tasks_test eval_run_test server_test thread_pool_test)

# -Og -g1: line numbers in reports; -Og instead of ASan's usual -O1 because the build is most of this script's
# time and -Og compiles in ~60% of -O1's time (measured on src/ckpt/checkpoint.cpp: 12.9 vs 20.8 s).
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-Og -g1" \
  -DZAYA_SANITIZE=address,undefined -DZAYA_FUZZ_COVERAGE=ON -DZAYA_BUILD_BENCH=OFF >/dev/null
ninja -C "$B" -j"$JOBS" "${FUZZ_TARGETS[@]}" "${TEST_BINARIES[@]}"
T_BUILD=$(date +%s)
echo "sanitize: build $((T_BUILD - T0)) s"

# Halt at the first report (UBSan is already fatal: -fno-sanitize-recover=all); leak checking on, with the
# committed suppressions for the external libraries' globals (scripts/lsan.supp says why each is there).
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_leaks=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:report_error_type=1:${UBSAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$ROOT/scripts/lsan.supp:print_suppressions=0:${LSAN_OPTIONS:-}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"

LOG="$B/sanitize-logs"
rm -rf "$LOG"
mkdir -p "$LOG"
failed=()
# A run fails on a non-zero exit or on any sanitizer report in its output (belt and braces: a report from a
# child process reaches the log but maybe not the exit status).
check_run() {
  local name=$1 log=$2 rc=$3
  if [ "$rc" -ne 0 ] || grep -qE "ERROR: (Address|Leak|Undefined)Sanitizer|runtime error:" "$log"; then
    echo "sanitize: FAILED $name (exit $rc); the log: $log"
    grep -E -A30 "ERROR: (Address|Leak|Undefined)Sanitizer|runtime error:|CRASH|FAILED|Failure" "$log" | head -80
    failed+=("$name")
  fi
}

for t in "${TEST_BINARIES[@]}"; do
  s=$(date +%s)
  set +e
  (cd "$B" && timeout 900 "tests/$t" --gtest_filter="${TESTS[$t]}" --gtest_brief=1) >"$LOG/$t.log" 2>&1
  rc=$?
  set -e
  echo "sanitize: $t: $(grep -E '^\[=+\] [0-9]+ tests? ' "$LOG/$t.log" | sed 's/^\[=*\] //') exit $rc ($(($(date +%s) - s)) s)"
  check_run "$t" "$LOG/$t.log" "$rc"
done
T_TESTS=$(date +%s)

for f in "${FUZZ_TARGETS[@]}"; do
  set +e
  corpus=()
  [ -d "$ROOT/fuzz/corpus/$f" ] && corpus=("$ROOT/fuzz/corpus/$f") # jinja_fuzz: built-in seeds only
  (cd "$B" && timeout $((FUZZ_SECONDS + 300)) "./fuzz/$f" --seconds "$FUZZ_SECONDS" --crash-dir "$ROOT/$LOG" \
    "${corpus[@]}") \
    >"$LOG/$f.log" 2>&1
  rc=$?
  set -e
  echo "sanitize: $f: $(grep -E '^fuzz: [0-9]+ mutated inputs' "$LOG/$f.log" | sed 's/^fuzz: //' ||
    grep -m1 '^fuzz: .* seed' "$LOG/$f.log") exit $rc"
  check_run "$f" "$LOG/$f.log" "$rc"
done
T_END=$(date +%s)

echo "sanitize: wall time $((T_END - T0)) s (build $((T_BUILD - T0)) s, tests $((T_TESTS - T_BUILD)) s, fuzzing $((T_END - T_TESTS)) s)"
if [ ${#failed[@]} -gt 0 ]; then
  echo "sanitize: FAILED: ${failed[*]} (logs in $LOG; a fuzz crash input is in $LOG, its path and seed in the log)"
  exit 1
fi
echo "sanitize: clean"
