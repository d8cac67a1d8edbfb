#!/usr/bin/env bash
# Choice and held-out scores of the ECG-only HR candidates (result.md here).
#   eval.sh select MODEL.onnx...   the selection sets (choices only), all models in one run,
#                                  and the real development ECG (systole)
#   eval.sh test MODEL.onnx        once, for the chosen model: the held-out simulated test
#                                  sets (by rate band), the same with NeuroKit2 on 32-s
#                                  windows, and the real recordings (final checks included)
set -euo pipefail
PY=${PYTHON:-.venv/bin/python}
L=${LIQUID_STREAM:-.venv/bin/liquid-stream}
mode=$1; shift
case $mode in
select)
  for R in runs/ecgb/sel-rich-s19 runs/sim/sel-s9; do $PY bench/vitals_stream.py "$@" --records $R; done
  for M in "$@"; do
    $PY experiments/2026-12-07-ecg-beat-count/real_with.py "$M" vitals-ecg-hr runs/real --only dev \
      --records systole_ecg_resp --no-peers --out "${M%.onnx}-real-dev"
  done
  ;;
test)
  M=$1 CK=$2  # the graph and the checkpoint it was exported from
  for R in runs/ecgx/test-rich-s23 runs/sim/s13-120; do
    $PY bench/vitals_stream.py "$M" --records $R --bands 60,100,140 --worst 5
    $L evaluate "$CK" --baseline --device cpu --data $R --out "${M%.onnx}-eval-${R##*/}"
  done
  ;;
esac
