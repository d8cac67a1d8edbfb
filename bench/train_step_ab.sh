#!/usr/bin/env bash
# Seconds per training step of the KWS cpu preset (2 threads, the main job's trainer),
# code of revision A vs revision B, in interleaved rounds on the same machine:
#
#   bash bench/train_step_ab.sh A B [DATA] [ROUNDS]    # e.g. 4a098b3 HEAD runs/s/speech 3
#   SETS_B="--set train.amp=true" bash bench/train_step_ab.sh HEAD HEAD   # settings, not code
#
# SETS_A / SETS_B: more `train` arguments for the runs of A / B (e.g. bf16 autocast).
# Each measurement is `liquid-stream train speech-stream --preset cpu --data DATA
# --max-steps N` for N = 50 and N = 250 (the same seed and data); the step time is the
# difference of the two times / 200, so start-up, the normaliser statistics and the last
# save cancel (one validation, at step 200, stays in). Wall time and the process's CPU time
# (user + system) are both given: on a shared virtual machine the wall time also counts
# what other tenants take, the CPU time less so. The revision's liquid_stream/
# and training/ are checked out for its runs and HEAD's restored after; the script refuses
# to run while those folders have uncommitted changes (they would be lost).
set -euo pipefail
A=${1:?revision A}; B=${2:?revision B}; DATA=${3:-runs/s/speech}; ROUNDS=${4:-3}
cd "$(dirname "$0")/.."
if [ -n "$(git status --porcelain -- liquid_stream training)" ]; then
  echo "train_step_ab: commit or stash the changes in liquid_stream/ and training/ first" >&2
  exit 2
fi
PY=${PYTHON:-.venv/bin/python}
OUT=$(mktemp -d)
trap 'git checkout -q HEAD -- liquid_stream training; rm -rf "$OUT"' EXIT
TIMEFORMAT='%R %U %S'
times_of() {  # "wall cpu" seconds of $1 steps with settings $2 (cpu = user + system)
  rm -rf "$OUT/run"
  local t
  t=$( { time "$PY" -m liquid_stream.cli train speech-stream --preset cpu --data "$DATA" \
         --out "$OUT/run" --max-steps "$1" $2 > "$OUT/log" 2>&1 ; } 2>&1 ) \
    || { cat "$OUT/log" >&2; exit 1; }
  set -- $t
  echo "$1 $(echo "$2 + $3" | bc -l)"
}
step() {  # "wall cpu" seconds per step at revision $1 with settings $2
  git checkout -q "$1" -- liquid_stream training
  local a b
  a=($(times_of 50 "$2")); b=($(times_of 250 "$2"))
  printf '%.4f %.4f' "$(echo "(${b[0]} - ${a[0]}) / 200" | bc -l)" \
    "$(echo "(${b[1]} - ${a[1]}) / 200" | bc -l)"
}
echo "command: SETS_A='${SETS_A:-}' SETS_B='${SETS_B:-}' bash bench/train_step_ab.sh $*"
echo "| round | $A wall s/step | $B wall s/step | $A / $B (wall) | $A CPU s/step | $B CPU s/step | $A / $B (CPU) |"
echo "|---|---|---|---|---|---|---|"
for r in $(seq 1 "$ROUNDS"); do
  ta=($(step "$A" "${SETS_A:-}")); tb=($(step "$B" "${SETS_B:-}"))
  printf '| %d | %s | %s | %.2f | %s | %s | %.2f |\n' "$r" "${ta[0]}" "${tb[0]}" \
    "$(echo "${ta[0]} / ${tb[0]}" | bc -l)" "${ta[1]}" "${tb[1]}" \
    "$(echo "${ta[1]} / ${tb[1]}" | bc -l)"
done
