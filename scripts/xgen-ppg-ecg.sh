#!/usr/bin/env bash
# Cross-generator test of the PPG + ECG HR recipe (docs/benchmarks.md §5.2): the main job's
# 12.5 Hz stack (--preset ppg+ecg) trained on one morphology family of the randomised
# simulator (ECG, pulse and respiration shapes all come from the family) and scored on
# the other, both directions: the windows stage and one stream stage of crops, as the main
# job's first two stages, without any augmentation; then the nk2 -> param stream stage
# with the pulse-shape augmentation (data.pulse_eq) at two strengths.
#
# Needs the family subsets of scripts/xgen-pulse-eq.sh (runs/xg/{nk2,param},
# runs/xg/{sel,s13}-{nk2,param}: its `subset` lines). Run 2026-11-29 afternoon on 2 cores,
# the two directions side by side, one thread each (~45 min in all).
set -euo pipefail
cd "$(dirname "$0")/.."
L=".venv/bin/liquid-stream"
X=runs/xg
V12=(--set model.frontend.hop=10 --set model.decoder_window=400 --set model.dt_min=0.002
  --set model.dt_max=0.2 --set model.dropout=0)
CROPS=(--set data.crop_s=192 --set data.crop_hop_s=24 --set optim.batch_size=8 --set optim.epochs=1)
P=(--target hr --preset ppg+ecg "${V12[@]}" --set train.threads=1)
direction() {  # direction FAMILY: the two stages on that family, exported
  local fam=$1
  $L train bidmc "${P[@]}" --data "$X/$fam" --set optim.epochs=1 --set data.hop=1050 \
    --out "$X/pe-$fam-windows"
  $L train bidmc "${P[@]}" "${CROPS[@]}" --data "$X/$fam" --set optim.lr=0.002 \
    --set train.init="$X/pe-$fam-windows/best.pt" --out "$X/pe-$fam-stream"
  $L export "$X/pe-$fam-stream/best.pt" --onnx "$X/pe-$fam-stream.onnx" --chunk 125 --sub-block 1
}
score() {  # score GRAPH...: each streamed over each family's selection and seed-13 records
  for s in sel s13; do
    for fam in nk2 param; do
      .venv/bin/python bench/vitals_stream.py "$@" --records "$X/$s-$fam" --worst 3
    done
  done
}
direction nk2 > "$X/pe-nk2.log" 2>&1 &
sleep 60  # the two record loads one after the other (memory)
direction param > "$X/pe-param.log" 2>&1
wait
# for scale, the main job's second stage on both families (scripts/ship-vitals.sh: MJ/train-hr)
score "$X/pe-nk2-stream.onnx" "$X/pe-param-stream.onnx" runs/mj12/vitals/hr.onnx

# The nk2 -> param direction again with the pulse-shape augmentation in its stream stage
# (every channel, p = 0.5; knot gains within ±12 and ±6 dB), the two side by side.
for db in 12 6; do
  { $L train bidmc "${P[@]}" "${CROPS[@]}" --data "$X/nk2" --set optim.lr=0.002 \
      --set train.init="$X/pe-nk2-windows/best.pt" --set data.pulse_eq=0.5 \
      --set data.pulse_eq_db=$db --out "$X/pe-nk2-eq$db" &&
    $L export "$X/pe-nk2-eq$db/best.pt" --onnx "$X/pe-nk2-eq$db.onnx" --chunk 125 --sub-block 1
  } > "$X/pe-nk2-eq$db.log" 2>&1 &
  sleep 60
done
wait
score "$X/pe-nk2-eq12.onnx" "$X/pe-nk2-eq6.onnx"
