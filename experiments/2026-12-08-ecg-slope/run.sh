#!/usr/bin/env bash
# ECG-only HR with the scale-norm front end's per-frame slope features (issue 64 item 3,
# after experiments/2026-12-07-ecg-hr and -ecg-beat-count): the commands of this experiment,
# in the order they ran (2026-12-08, 2 CPU cores, one torch thread per run). Results:
# result.md here. Resumable: a stage with a best.pt is not retrained.
#   bash experiments/2026-12-08-ecg-slope/run.sh
set -euo pipefail
L=${LIQUID_STREAM:-.venv/bin/liquid-stream}
PY=${PYTHON:-.venv/bin/python}
X=experiments/2026-12-08-ecg-slope
D=runs/ecgb  # the record sets of experiments/2026-12-07-ecg-beat-count/run.sh
O=runs/ecgs
mkdir -p $O
# warm start: p5 of experiments/2026-12-07-ecg-hr, given the slope features with zero weight
# (it reads exactly as p5 until training moves the new encoder column)
[ -f $O/p5-slope0.pt ] || $PY $X/widen_slope.py runs/ecgx/p5/last.pt $O/p5-slope0.pt
S=(--set model.frontend.hop=10 --set model.decoder_window=400 --set model.dt_min=0.002
  --set model.dt_max=0.2 --set model.dropout=0)
R="[$D/rich-s41-600,$D/rich-s43-1200]"
stage() {  # stage OUT INIT LR EPOCHS SLOPE
  local out=$1 init=$2 lr=$3 ep=$4 slope=$5
  [ -f "$out/best.pt" ] || $L train bidmc --target hr --preset ecg "${S[@]}" --data $D/s0-1500 \
    --set model.frontend.slope="$slope" \
    --set data.crop_s=192 --set data.crop_hop_s=24 --set optim.batch_size=8 \
    --set optim.epochs="$ep" --set optim.lr="$lr" --set "data.extra_train=$R" \
    --set train.init="$init" --set train.threads=1 --set train.progress=false --out "$out"
}
# the pair, side by side: the same pass from p5 with and without the slope features
stage $O/s1 $O/p5-slope0.pt 0.0005 2 true &
stage $O/c1 runs/ecgx/p5/last.pt 0.0005 2 false &
wait
# s1 read better than c1 on both selection sets (result.md); the error is mostly a few
# high-rate bigeminy / trigeminy records read at the rate of the pairs: a longer pass from s1
stage $O/s2 $O/s1/last.pt 0.001 3 true
# and, on the other core meanwhile, the same stack from scratch with the slope features (no
# warm start from the PPG+ECG model's way of reading a rhythm): 4 epochs, the preset's lr
[ -f $O/f1/best.pt ] || $L train bidmc --target hr --preset ecg "${S[@]}" --data $D/s0-1500 \
  --set model.frontend.slope=true --set data.crop_s=192 --set data.crop_hop_s=24 \
  --set optim.batch_size=8 --set optim.epochs=4 --set "data.extra_train=$R" \
  --set train.threads=1 --set train.progress=false --out $O/f1
# f1 read the ectopy-rich selection set at 5.25 (s2 12.90): two more passes from it, side by side
stage $O/f2a $O/f1/last.pt 0.001 3 true &
stage $O/f2b $O/f1/last.pt 0.0005 2 true &
wait
