#!/usr/bin/env bash
# Vital-sign models on one lent GPU (issue 20): the same two stages as scripts/ship-vitals.sh
# (32 s windows, then as a stream: 192 s crops scored every second), from scratch on a larger
# randomised set (N records of 4 min, seed 3; at most 999) with larger batches. Four models
# train at once on the one GPU (each is far too small to fill it); each stage is cut at its
# time limit and keeps its best checkpoint so far (chosen on the set's validation records).
#   bash scripts/gpu-vitals.sh OUT [N=999] [DEVICE=cuda]
# Env: EP1 / EP2 epochs (the cosine schedules span them), T1 / T2 seconds per stage, WORKERS
# for the simulator; the defaults are what made the shipped models (one lent H100,
# 2026-11-27: `bash scripts/gpu-vitals.sh /tmp/gv`; the models' cards give the epochs each
# stage completed, and scripts/ship-vitals.sh writes these commands out for the cards).
set -uo pipefail
OUT=$1; N=${2:-999}; DEV=${3:-cuda}
L=${LIQUID_STREAM:-liquid-stream}
EP1=${EP1:-8}; EP2=${EP2:-15}; T1=${T1:-220}; T2=${T2:-210}
SIM=$OUT/sim$N
mkdir -p "$OUT"
$L data bidmc-sim "$SIM" --records "$N" --minutes 4 --seed 3 --randomised \
  --workers "${WORKERS:-16}" > "$OUT/sim.log" 2>&1 || { tail "$OUT/sim.log"; exit 1; }
one() {  # one NAME PRESET TARGET "ARGS OF BOTH STAGES" [STAGE-2 ARGS...]
  local name=$1 p=$2 t=$3 both=$4; shift 4
  local r1=$OUT/$name-1 r2=$OUT/$name-2
  timeout "$T1" $L train bidmc --preset "$p" --target "$t" --data "$SIM" --device "$DEV" \
    --out "$r1" --set optim.batch_size=64 --set optim.epochs="$EP1" --set train.threads=2 \
    --set train.progress=false $both > "$OUT/$name-1.log" 2>&1
  [ -f "$r1/best.pt" ] || { echo "$name: stage 1 left no best.pt"; return; }
  timeout "$T2" $L train bidmc --preset "$p" --target "$t" --data "$SIM" --device "$DEV" \
    --out "$r2" --set train.init="$r1/best.pt" --set optim.lr=0.002 --set data.crop_s=192 \
    --set data.crop_hop_s=48 --set optim.batch_size=16 --set optim.epochs="$EP2" \
    --set optim.warmup_steps=50 --set train.threads=2 --set train.progress=false $both "$@" \
    > "$OUT/$name-2.log" 2>&1
  echo "$name: stage 2 rc=$?"
}
one ppg-rr ppg rr "" &
one ppg-ecg-rr ppg+ecg rr "" &
one ppg-ecg-hr ppg+ecg hr "" --set data.channel_off=0.3 &
one ppg-rr-big ppg rr "--set model.d_model=128 --set model.n_layers=6" &
wait
