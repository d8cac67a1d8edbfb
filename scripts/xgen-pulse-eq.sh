#!/usr/bin/env bash
# Cross-generator test of the pulse-shape augmentation (data.pulse_eq,
# training/data/vitals/pulse_eq.py), docs/benchmarks.md §5.2: a PPG HR model trained on one pulse
# morphology family of the randomised simulator and scored on the other, with and without
# the augmentation; both directions (nk2 -> param, param -> nk2). Then one more pass of the
# shipped vitals-ppg-hr recipe (runs/s12/ppg-hr-3, both families) with and without it.
#
# Needs runs/v3k/records (scripts/ship-vitals.sh makes it), runs/sim/sel-s9 and
# runs/sim/s13-120 (`liquid-stream data bidmc-sim runs/sim/sel-s9 --records 120 --minutes 4
# --randomised --seed 9`, and --seed 13). Run 2026-11-29 on 2 cores, one thread a run, two
# or three runs at a time (~45 min in all).
set -euo pipefail
cd "$(dirname "$0")/.."
L=".venv/bin/liquid-stream"
X=runs/xg

# One family of a randomised record folder, as links (params.json names each record's).
subset() {  # subset SRC DST FAMILY
  .venv/bin/python scripts/family_subset.py "$@"
}
for fam in nk2 param; do
  subset runs/v3k/records "$X/$fam" "$fam"
  subset runs/sim/sel-s9 "$X/sel-$fam" "$fam"
  subset runs/sim/s13-120 "$X/s13-$fam" "$fam"
done

V12=(--set model.frontend.hop=10 --set model.decoder_window=400 --set model.dt_min=0.002
  --set model.dt_max=0.2 --set model.dropout=0)
CROPS=(--set data.crop_s=192 --set data.crop_hop_s=24 --set optim.batch_size=8 --set optim.epochs=1)
P=(--target hr --preset ppg "${V12[@]}" --set train.threads=1)

# nk2 -> param (runs a, b, c) and param -> nk2 (runs p-stream-a, -b, -c): the main job's
# first two stages on one family; the stream stage without the augmentation (a), with it
# (b) and with a milder one, knot gains within ±6 dB instead of ±12 (c: data.pulse_eq_db=6,
# run 2026-11-29 afternoon, after the rest of this script).
eq_args() {  # eq_args VARIANT: the augmentation's settings of variant a, b or c
  case $1 in
    a) echo "--set data.pulse_eq=0" ;;
    b) echo "--set data.pulse_eq=0.5" ;;
    c) echo "--set data.pulse_eq=0.5 --set data.pulse_eq_db=6" ;;
  esac
}
$L train bidmc "${P[@]}" --data "$X/nk2" --set optim.epochs=1 --set data.hop=1050 --out "$X/windows"
$L train bidmc "${P[@]}" --data "$X/param" --set optim.epochs=1 --set data.hop=1050 --out "$X/p-windows"
for pre in "" p-; do
  fam=$([ -z "$pre" ] && echo nk2 || echo param)
  w=$([ -z "$pre" ] && echo windows || echo p-windows)
  for v in a b c; do
    run="$X/${pre}stream-$v"
    # shellcheck disable=SC2046  # eq_args's words are separate arguments
    $L train bidmc "${P[@]}" "${CROPS[@]}" --data "$X/$fam" --set optim.lr=0.002 \
      --set train.init="$X/$w/best.pt" $(eq_args $v) --out "$run"
    $L export "$run/best.pt" --onnx "$run.onnx" --chunk 125 --sub-block 1
  done
done
for s in sel s13; do
  for fam in nk2 param; do
    for pre in "" p-; do
      .venv/bin/python bench/vitals_stream.py "$X/${pre}stream-"{a,b,c}.onnx --records "$X/$s-$fam" \
        --worst 3
    done
  done
done

# Both families: one more pass of the shipped PPG HR model (lr 0.0005), without (ppg-hr-4),
# with the augmentation (ppg-hr-eq) and with the milder one (ppg-hr-eq6, run later),
# scored on the selection set.
for v in a b c; do
  run=$X/$(case $v in a) echo ppg-hr-4 ;; b) echo ppg-hr-eq ;; c) echo ppg-hr-eq6 ;; esac)
  # shellcheck disable=SC2046
  $L train bidmc "${P[@]}" "${CROPS[@]}" --data runs/v3k/records --set optim.lr=0.0005 \
    --set train.init=runs/s12/ppg-hr-3/best.pt $(eq_args $v) --out "$run"
  $L export "$run/best.pt" --onnx "$run.onnx" --chunk 125 --sub-block 1
done
.venv/bin/python bench/vitals_stream.py liquid_stream/models/vitals-ppg-hr.onnx "$X/ppg-hr-4.onnx" \
  "$X/ppg-hr-eq.onnx" "$X/ppg-hr-eq6.onnx" --records runs/sim/sel-s9 --worst 3
