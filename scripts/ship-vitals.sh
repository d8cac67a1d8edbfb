#!/usr/bin/env bash
# The commands that made the shipped vital-sign models liquid_stream/models/vitals-*.onnx
# (each has a model card beside it, written from its run by scripts/vitals_card.py).
# Resumable: a model whose run has a best.pt is not retrained.
#   bash scripts/ship-vitals.sh [OUT=runs/vit]
set -euo pipefail
OUT=${1:-runs/vit}
L=${LIQUID_STREAM:-.venv/bin/liquid-stream}
PY=${PYTHON:-.venv/bin/python}
ship() {  # ship PRESET TARGET NAME
  local run="$OUT/${1/+/-}-$2"
  local cmd="liquid-stream train bidmc --preset $1 --target $2 --out $run --set train.threads=1"
  [ -f "$run/best.pt" ] || $L ${cmd#liquid-stream }
  [ -f "$run/agreement_$2_record_test.json" ] || $L evaluate "$run/best.pt" --baseline --device cpu
  $L export "$run/best.pt" --onnx "liquid_stream/models/$3.onnx" --chunk 125 --verify \
    --verify-length 8000
  $PY scripts/vitals_card.py "$run" "$3" "$cmd"
}
ship ppg hr vitals-ppg-hr
ship ppg rr vitals-ppg-rr
# (no SpO2 model is shipped: `train bidmc --preset ppg --target spo2` gave RMSE 4.9 %,
#  slope 0.22 on held-out records — it did not learn the simulator's SpO2 cue)
ship ppg+ecg hr vitals-ppg-ecg-hr
ship ppg+ecg rr vitals-ppg-ecg-rr
