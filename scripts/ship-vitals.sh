#!/usr/bin/env bash
# The commands that made the shipped vital-sign models liquid_stream/models/vitals-*.onnx
# (each has a model card beside it, written from its run by scripts/vitals_card.py).
# Resumable: a run that has a best.pt is not retrained.
#   bash scripts/ship-vitals.sh [OUT=runs/vit]
#
# Every model: stage 1 on 32 s windows of 240 randomised records (seed 0), then warm-started
# stages on 480 new randomised records (seed 1); the last stage is trained as the monitor
# runs it, as a stream (192 s crops scored every second, training/data/bidmc_crops.py).
# Each stage was kept because it beat the one before on the validation records' streamed
# score (docs/benchmarks.md §5.2).
set -euo pipefail
OUT=${1:-runs/vit}
L=${LIQUID_STREAM:-.venv/bin/liquid-stream}
PY=${PYTHON:-.venv/bin/python}
CMDS=()  # the training commands of the model being made, for its card
train() {  # train RUN ARGS...: `liquid-stream train bidmc ARGS --out RUN`, unless done
  local run=$1; shift
  CMDS+=("liquid-stream train bidmc $* --out $run --set train.threads=1")
  [ -f "$run/best.pt" ] || $L train bidmc "$@" --out "$run" --set train.threads=1
}
seed1() {  # seed1 RUN PRESET TARGET INIT ARGS...: a warm start on the 480 records of seed 1
  local run=$1 p=$2 t=$3 init=$4; shift 4
  train "$run" --preset "$p" --target "$t" --set data.sim_seed=1 --set data.sim_records=480 \
    --set optim.lr=0.002 --set train.init="$init" "$@"
}
stream() {  # stream RUN PRESET TARGET INIT EPOCHS [ARGS...]: seed1, as a stream (192 s crops)
  local run=$1 p=$2 t=$3 init=$4 epochs=$5; shift 5
  seed1 "$run" "$p" "$t" "$init" --set data.crop_s=192 --set data.crop_hop_s=48 \
    --set optim.batch_size=8 --set optim.epochs="$epochs" --set optim.warmup_steps=50 "$@"
}
ship() {  # ship RUN NAME: evaluate the last stage, export it, write its card
  local run=$1 t=${2##*-}  # vitals-ppg-ecg-hr -> hr
  [ -f "$run/agreement_${t}_record_test.json" ] || $L evaluate "$run/best.pt" --baseline --device cpu
  $L export "$run/best.pt" --onnx "liquid_stream/models/$2.onnx" --chunk 125 --verify \
    --verify-length 8000
  $PY scripts/vitals_card.py "$run" "$2" "$(printf '%s\n' "${CMDS[@]}")"
  CMDS=()
}
# vitals-ppg-hr: stage 1; stage 2 (6 epochs of windows); stage 3 (10 epochs as a stream)
train "$OUT/ppg-hr" --preset ppg --target hr
seed1 "${OUT}2/ppg-hr" ppg hr "$OUT/ppg-hr/best.pt" --set optim.epochs=6 --set optim.warmup_steps=100
stream "${OUT}3/ppg-hr" ppg hr "${OUT}2/ppg-hr/best.pt" 10
ship "${OUT}3/ppg-hr" vitals-ppg-hr
# vitals-ppg-rr: stage 1; then 10 epochs as a stream
train "$OUT/ppg-rr" --preset ppg --target rr
stream "${OUT}3/ppg-rr" ppg rr "$OUT/ppg-rr/best.pt" 10
ship "${OUT}3/ppg-rr" vitals-ppg-rr
# vitals-ppg-ecg-hr: stage 1; then 6 epochs as a stream; then 10 more as a stream; then 8
# more with one channel at a time held flat over a stretch (data.channel_off, stage 5)
train "$OUT/ppg-ecg-hr" --preset ppg+ecg --target hr
stream "${OUT}3/ppg-ecg-hr" ppg+ecg hr "$OUT/ppg-ecg-hr/best.pt" 6
stream "${OUT}4/ppg-ecg-hr" ppg+ecg hr "${OUT}3/ppg-ecg-hr/best.pt" 10
stream "${OUT}5/ppg-ecg-hr-off" ppg+ecg hr "${OUT}4/ppg-ecg-hr/best.pt" 8 --set data.channel_off=0.3
ship "${OUT}5/ppg-ecg-hr-off" vitals-ppg-ecg-hr
# vitals-ppg-ecg-rr: stage 1; then 8 epochs as a stream
train "$OUT/ppg-ecg-rr" --preset ppg+ecg --target rr
stream "${OUT}3/ppg-ecg-rr" ppg+ecg rr "$OUT/ppg-ecg-rr/best.pt" 8
ship "${OUT}3/ppg-ecg-rr" vitals-ppg-ecg-rr
# No SpO2 model is shipped: `train bidmc --preset ppg --target spo2` gave RMSE 4.9 %, slope
# 0.22 on held-out records, and `python bench/spo2_cue.py` shows why: with the pulse shape
# randomised, one PPG channel does not carry the simulator's SpO2 cue.
