#!/usr/bin/env bash
# ECG-only HR that counts beats (issue 64 item 3, after experiments/2026-12-07-ecg-hr): the
# commands of this experiment, in the order they ran (2026-12-07, 2 CPU cores). Results:
# result.md here. Resumable: a stage with a best.pt is not retrained.
#   bash experiments/2026-12-07-ecg-beat-count/run.sh
set -euo pipefail
L=${LIQUID_STREAM:-.venv/bin/liquid-stream}
PY=${PYTHON:-.venv/bin/python}
O=runs/ecgb
sim() {  # sim OUT ARGS...: a randomised record set (with its beat times), unless there
  local out=$1; shift
  [ -f "$out/params.json" ] || $L data bidmc-sim "$out" --minutes 4 --randomised --workers 2 "$@"
}
# the record sets of experiments/2026-12-07-ecg-hr, generated again: they now carry each
# record's R-peak times (<name>.beats.npy), the beat targets (same seeds, same records)
sim $O/s0-1500 --records 1500 --seed 0
sim $O/rich-s41-600 --records 600 --ectopy rich --seed 41
sim $O/rich-s43-1200 --records 1200 --ectopy rich --seed 43
sim $O/sel-rich-s19 --records 120 --ectopy rich --seed 19
sim runs/sim/sel-s9 --records 120 --seed 9
sim runs/sim/s13-120 --records 120 --seed 13
sim runs/ecgx/test-rich-s23 --records 120 --ectopy rich --seed 23

# warm start: the ECG-only regression model of experiments/2026-12-07-ecg-hr (its p5 last.pt);
# then passes with the per-frame beat-density loss (data.beats, training/data/vitals/bidmc_crops.py)
S=(--set model.frontend.hop=10 --set model.decoder_window=400 --set model.dt_min=0.002
  --set model.dt_max=0.2 --set model.dropout=0)
R="[$O/rich-s41-600,$O/rich-s43-1200]"
stage() {  # stage OUT INIT LR EPOCHS BEATS
  local out=$1 init=$2 lr=$3 ep=$4 beats=$5
  [ -f "$out/best.pt" ] || $L train bidmc --target hr --preset ecg "${S[@]}" --data $O/s0-1500 \
    --set data.crop_s=192 --set data.crop_hop_s=24 --set optim.batch_size=8 \
    --set optim.epochs="$ep" --set optim.lr="$lr" --set "data.extra_train=$R" \
    --set data.beats="$beats" --set train.init="$init" --set train.threads=2 \
    --set train.progress=false --out "$out"
  $L export "$out/last.pt" --onnx "$out-last.onnx" --chunk 125 --sub-block 1
}
stage $O/b1 runs/ecgx/p5/last.pt 0.0005 2 0.5
# b1 (beats per 80-ms frame) read worse than p5 on every selection set (result.md): the
# same pass from p5 with the beats scored as counts over a causal 1-s box
stage_box() {  # stage_box OUT INIT LR EPOCHS BEATS BOX_S
  local out=$1 init=$2 lr=$3 ep=$4 beats=$5 box=$6
  [ -f "$out/best.pt" ] || $L train bidmc --target hr --preset ecg "${S[@]}" --data $O/s0-1500 \
    --set data.crop_s=192 --set data.crop_hop_s=24 --set optim.batch_size=8 \
    --set optim.epochs="$ep" --set optim.lr="$lr" --set "data.extra_train=$R" \
    --set data.beats="$beats" --set data.beats_box_s="$box" --set train.init="$init" \
    --set train.threads=2 --set train.progress=false --out "$out"
  $L export "$out/last.pt" --onnx "$out-last.onnx" --chunk 125 --sub-block 1
}
stage_box $O/b2 runs/ecgx/p5/last.pt 0.0005 1 0.5 1.0  # one epoch: the cores were shared
