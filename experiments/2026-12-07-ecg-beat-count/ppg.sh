#!/usr/bin/env bash
# The same beat-density loss for the PPG-only HR model (heartpy's PPGs, final checks, are
# where it loses): a warm start from the shipped vitals-ppg-hr (its graph's weights), one
# pass with data.beats (bumps 0.7 s after the R peak: the pulse arrives PTT = 0.15-0.35 s
# after it and peaks ~0.2 s later), the pulse equaliser of its last pass kept.
#   bash experiments/2026-12-07-ecg-beat-count/ppg.sh
set -euo pipefail
L=${LIQUID_STREAM:-.venv/bin/liquid-stream}
PY=${PYTHON:-.venv/bin/python}
O=runs/ecgb
mkdir -p $O/w
[ -f $O/w/ppg-hr.pt ] || $PY scripts/checkpoint_from_onnx.py liquid_stream/models/vitals-ppg-hr.onnx $O/w/ppg-hr.pt
S=(--set model.frontend.hop=10 --set model.decoder_window=400 --set model.dt_min=0.002
  --set model.dt_max=0.2 --set model.dropout=0)
out=$O/pb1
[ -f "$out/best.pt" ] || $L train bidmc --target hr --preset ppg "${S[@]}" --data $O/s0-1500 \
  --set data.crop_s=192 --set data.crop_hop_s=24 --set optim.batch_size=8 \
  --set optim.epochs=2 --set optim.lr=0.00025 --set data.pulse_eq=0.5 \
  --set "data.extra_train=[$O/rich-s41-600]" --set data.beats=0.5 --set data.beats_shift_s=0.7 \
  --set train.init=$O/w/ppg-hr.pt --set train.threads=2 --set train.progress=false --out $out
$L export "$out/last.pt" --onnx "$out-last.onnx" --chunk 125 --sub-block 1
