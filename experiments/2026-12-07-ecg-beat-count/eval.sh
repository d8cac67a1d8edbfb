#!/usr/bin/env bash
# Selection of the beat-count ECG model (sets used for choices only), then, once, the held-out
# simulated test sets and the real final check. Usage: eval.sh MODEL.onnx [select|test]
set -euo pipefail
PY=${PYTHON:-.venv/bin/python}
X=experiments/2026-12-07-ecg-beat-count
M=$1
case ${2:-select} in
select)  # simulated selection sets and the real development records (systole, pyhrv)
  for R in runs/sim/sel-s9 runs/ecgb/sel-rich-s19; do $PY bench/vitals_stream.py "$M" --records $R; done
  $PY $X/real_with.py "$M" vitals-ecg-hr runs/real --only dev --out "${M%.onnx}-real-dev"
  ;;
test)  # once, for the chosen model
  for R in runs/ecgx/test-rich-s23 runs/sim/s13-120; do
    $PY bench/vitals_stream.py "$M" --records $R --bands 60,100,140
  done
  $PY $X/real_with.py "$M" vitals-ecg-hr runs/real --only final --out "${M%.onnx}-real-final"
  ;;
esac
# (the comparison of result.md, one run: p5 of experiments/2026-12-07-ecg-hr, b1, b2)
#   for R in runs/ecgb/sel-rich-s19 runs/sim/sel-s9; do
#     python bench/vitals_stream.py runs/ecgx/p5-last.onnx runs/ecgb/b1-last.onnx \
#       runs/ecgb/b2-last.onnx --records $R; done
