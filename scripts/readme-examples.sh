#!/usr/bin/env bash
# Runs every example of README.md in order, as written, and fails naming the README line of the first one
# that fails. "Examples" are the lines of the README's ```sh blocks after its first one (the first block is
# the two README commands themselves, which must have run already: the examples use the build and the main
# job's model and data). Comment lines are skipped; lines ending in a backslash are joined; all lines run in
# one bash process (so `G=...` and `TOK=$(...)` carry over), from the repository root.
#
#   bash scripts/readme-examples.sh            # after bash scripts/main.sh and bash scripts/test.sh
#   bash scripts/fresh-check.sh "bash scripts/main.sh && bash scripts/test.sh && bash scripts/readme-examples.sh"
#
# The examples write to runs/examples/, which this script removes first (so that it can run again). As
# root it sets OMPI_ALLOW_RUN_AS_ROOT{,_CONFIRM}=1, as the README's data-parallel example says to.
set -euo pipefail
cd "$(dirname "$0")/.."

[ -x build/zaya ] || { echo "readme-examples: build/zaya is missing: run bash scripts/main.sh first" >&2; exit 1; }
[ -f runs/main/train/model/config.json ] ||
  { echo "readme-examples: runs/main/train/model is missing: run bash scripts/main.sh first" >&2; exit 1; }

script=$(mktemp /tmp/zaya-readme-examples.XXXXXX.sh)
log_dir=$(mktemp -d /tmp/zaya-readme-examples.XXXXXX)
trap 'rm -f "$script"; rm -rf "$log_dir"' EXIT

# README.md -> one bash script: before each example, record its README line number and text; run it with its
# output in a log (shown when it fails, its tail otherwise). python3 is there after the main job (matplotlib).
/usr/bin/python3 - README.md "$log_dir" > "$script" <<'EOF'
import shlex, sys
readme, log_dir = sys.argv[1], sys.argv[2]
lines = open(readme, encoding="utf-8").read().split("\n")
blocks, in_block, n = 0, False, 0
pending, pending_line = "", 0
print("set -uo pipefail")
for i, line in enumerate(lines, 1):
    if line.startswith("```"):
        if not in_block and line.strip() == "```sh":
            in_block, blocks = True, blocks + 1
        elif in_block:
            in_block = False
        continue
    if not in_block or blocks == 1:
        continue
    text = line.strip()
    if pending:
        pending += " " + text
    elif not text or text.startswith("#"):
        continue
    else:
        pending, pending_line = text, i
    if pending.endswith("\\"):
        pending = pending[:-1].rstrip()
        continue
    n += 1
    cmd, pending = pending, ""
    log = f"{log_dir}/{n}.log"
    print(f"echo {shlex.quote(f'== README.md:{pending_line}: {cmd}')}")
    # A brace group runs in this shell, so assignments (G=..., TOK=$(...)) carry over to later examples.
    # (on lines of their own: an example may end in a # comment)
    print(f"{{\n{cmd}\n}} > {shlex.quote(log)} 2>&1")
    print(f"rc=$?; tail -n 4 {shlex.quote(log)} | cut -c1-200 | sed 's/^/   | /'")
    print(f"if [ $rc -ne 0 ]; then echo {shlex.quote(f'README.md:{pending_line}: failed: {cmd}')} >&2;"
          f" echo \"exit code $rc; its output:\" >&2; cat {shlex.quote(log)} >&2; exit 1; fi")
print(f"echo; echo 'readme-examples: all {n} examples of README.md ran'")
EOF

if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
rm -rf runs/examples
start=$(date +%s)
bash "$script"
echo "readme-examples: $(( $(date +%s) - start )) s"
