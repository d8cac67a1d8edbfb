#!/usr/bin/env bash
# ECG-only HR (issue 64 item 3): the commands of this experiment, in the order they ran
# (2026-12-07, 2 CPU cores shared with two other sessions, one torch thread). Results:
# result.md here. Resumable: a stage with a best.pt is not retrained.
#   bash experiments/2026-12-07-ecg-hr/run.sh
set -euo pipefail
L=${LIQUID_STREAM:-.venv/bin/liquid-stream}
PY=${PYTHON:-.venv/bin/python}
X=experiments/2026-12-07-ecg-hr
O=runs/ecgx
sim() {  # sim OUT ARGS...: a randomised record set, unless there
  local out=$1; shift
  [ -f "$out/params.json" ] || $L data bidmc-sim "$out" --minutes 4 --randomised --workers 1 "$@"
}
# training records: 1500 randomised (seed 0; its record split gives the run's own
# validation / test records) + 600 and then 1200 ectopy-rich ones (seeds 41, 43), which join
# the training split only (data.extra_train)
sim $O/s0-1500 --records 1500
sim $O/rich-s41-600 --records 600 --ectopy rich --seed 41
sim $O/rich-s43-1200 --records 1200 --ectopy rich --seed 43
# selection sets (model choice only): 120 randomised records of seed 9, 120 ectopy-rich of 19
sim runs/sim/sel-s9 --records 120 --seed 9
sim $O/sel-rich-s19 --records 120 --ectopy rich --seed 19
# test sets (scored once, at the end): seed 13 randomised, seed 23 ectopy-rich
sim runs/sim/s13-120 --records 120 --seed 13
sim $O/test-rich-s23 --records 120 --ectopy rich --seed 23

# warm start: member 0 of the shipped PPG+ECG HR pair (as of 337374b), recovered from its
# graph, narrowed to II (PLETH's encoder column dropped: the PPG+ECG model with PLETH's
# normalised input held at 0)
mkdir -p $O/w
[ -f $O/w/pe-hr-head.onnx ] || git show 337374b:liquid_stream/models/vitals-ppg-ecg-hr.onnx > $O/w/pe-hr-head.onnx
[ -f $O/w/pe-hr-m0.pt ] || $PY scripts/checkpoint_from_onnx.py $O/w/pe-hr-head.onnx $O/w/pe-hr.pt
[ -f $O/w/ecg-from-pe-m0.pt ] || $PY $X/narrow.py $O/w/pe-hr-m0.pt $O/w/ecg-from-pe-m0.pt II

# passes of 192 s crops (the 12.5 Hz settings S of the PPG models), --preset ecg
S=(--set model.frontend.hop=10 --set model.decoder_window=400 --set model.dt_min=0.002
  --set model.dt_max=0.2 --set model.dropout=0)
stage() {  # stage OUT INIT LR EPOCHS EXTRA
  local out=$1 init=$2 lr=$3 ep=$4 extra=$5
  [ -f "$out/best.pt" ] || $L train bidmc --target hr --preset ecg "${S[@]}" --data $O/s0-1500 \
    --set data.crop_s=192 --set data.crop_hop_s=24 --set optim.batch_size=8 \
    --set optim.epochs="$ep" --set optim.lr="$lr" --set "data.extra_train=$extra" \
    --set train.init="$init" --set train.threads=1 --set train.progress=false --out "$out"
  $L export "$out/last.pt" --onnx "$out-last.onnx" --chunk 125 --sub-block 1
}
R1="[$O/rich-s41-600]" R2="[$O/rich-s41-600,$O/rich-s43-1200]"
stage $O/p1 $O/w/ecg-from-pe-m0.pt 0.001 1 "$R1"
stage $O/p2 $O/p1/best.pt 0.001 3 "$R1"
stage $O/p3 $O/p2/last.pt 0.001 2 "$R2"
stage $O/p4 $O/p3/last.pt 0.0005 3 "$R2"
stage $O/p5 $O/p4/last.pt 0.00025 2 "$R2"

# selection (each pass's last.pt; the run's best.pt is chosen on its own validation
# records, which are randomised ones only)
for m in $O/p2-last.onnx $O/p3-last.onnx $O/p4-last.onnx $O/p5-last.onnx; do
  for R in runs/sim/sel-s9 $O/sel-rich-s19; do $PY bench/vitals_stream.py "$m" --records $R; done
done
# the PPG+ECG model with PLETH flat: the monitor's signal-quality check (b602c60) blanks its
# estimates when PLETH is flat, so these runs switch the check off (bench_nosqi.py)
for R in $O/sel-rich-s19 $O/test-rich-s23 runs/sim/s13-120; do
  $PY $X/bench_nosqi.py liquid_stream/models/vitals-ppg-ecg-hr.onnx --records $R --flat PLETH
done
# the held-out test sets, once, for the chosen pass (p5's last.pt: the best on the ectopy-rich
# selection set and on both selection sets pooled): streamed as the monitor runs it, the same
# with the signal-quality check off (as the flat-PLETH runs above), NeuroKit2 beside the
# model on 32 s windows of each set's test split (evaluate --baseline), and by pattern
for R in $O/test-rich-s23 runs/sim/s13-120; do
  $PY bench/vitals_stream.py $O/p5-last.onnx --records $R --bands 60,100,140
  $PY $X/bench_nosqi.py $O/p5-last.onnx --records $R
  $L evaluate $O/p5/last.pt --baseline --device cpu --data $R --out $O/eval-${R##*/}
done
$PY $X/by_pattern.py $O/p5-last.onnx $O/test-rich-s23 --nosqi
$PY $X/by_pattern.py liquid_stream/models/vitals-ppg-ecg-hr.onnx $O/test-rich-s23 --nosqi --flat PLETH
