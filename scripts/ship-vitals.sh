#!/usr/bin/env bash
# The commands that made the shipped vital-sign models liquid_stream/models/vitals-*.onnx
# (each has a model card beside it, written from its run by scripts/vitals_card.py).
# Resumable: a run that has a best.pt is not retrained.
#   bash scripts/ship-vitals.sh [GPU=runs/gv]
#
# vitals-ppg-hr, vitals-ppg-ecg-hr (2 CPU cores, 2026-11-29): the main job's 12.5 Hz stages on
# its 2997 records, then two more passes of crops (lr 0.001, then 0.0005); each pass kept
# because it beat the one before on the run's own validation records, the last also on the
# selection set (docs/benchmarks.md §5.2). The 25 Hz vitals-ppg-hr before: this script at
# commit 823ed29.
# vitals-ppg-rr: the same two kinds of stage, trained on one lent GPU on 999 randomised
# records (seed 3) by scripts/gpu-vitals.sh, whose output folder is GPU here (the GPU runs
# are not repeated by this script); it replaced a CPU-trained model of the same recipe on 480
# records (its commands: this script at commit 44943ca) because it was better on 80 records
# of a fourth seed that no model had seen (docs/benchmarks.md §5.2).
# vitals-ppg-ecg-rr and vitals-ppg-ecg-hr: the main job's stages at 12.5 Hz on its 2997
# records (`python -m liquid_stream.main_job --part vitals`; three for RR, four for HR:
# main_job.PASSES, which took the HR model's fourth pass from here). They replaced
# GPU-trained models (commands: this script at commit dbdf369) because they were better on
# the selection set (120 records of seed 9; docs/benchmarks.md §5.2). The arguments are
# spelled out below, not read from main_job.py, so that this stays the record of what made
# the shipped files when the main job changes. Since 2026-11-29 each is one graph averaging
# that model and a second one of the same stages from seed 1 (ship_mean); since that evening
# each RR member has a fourth pass with the pulse-shape equaliser at ±6 dB (pe-rr-eq6), rerun
# from its first stage on a new machine (the chain is not bit-identical across machines:
# the pair read the selection set at 1.680 breaths/min here, 1.692 in the first run).
# Since 2026-12-01 every shipped model but vitals-oximeter-spo2 has one more pass of crops,
# trained from the weights of the graph shipped at de964f7 (`recover`: the run folders of the
# stages before were not on that machine; scripts/checkpoint_from_onnx.py rebuilds a
# checkpoint from a graph), each chosen on the selection set (docs/benchmarks.md §5.2).
set -euo pipefail
GPU=${1:-runs/gv}
L=${LIQUID_STREAM:-.venv/bin/liquid-stream}
PY=${PYTHON:-.venv/bin/python}
CMDS=()  # the training commands of the model being made, for its card
THREADS=1  # torch threads of each training run
train() {  # train RUN ARGS...: `liquid-stream train bidmc ARGS --out RUN`, unless done
  local run=$1; shift
  CMDS+=("liquid-stream train bidmc $* --out $run --set train.threads=$THREADS")
  [ -f "$run/best.pt" ] || $L train bidmc "$@" --out "$run" --set train.threads=$THREADS
}
ship() {  # ship RUN NAME [DATA [HARDWARE [COMMIT]]]: evaluate the last stage (on the record set
  # DATA, which the run trained on, when given), export it, write its card
  local run=$1 name=$2 t=${2##*-} ev=() card=()  # vitals-ppg-ecg-hr -> hr
  if [ -n "${3:-}" ]; then
    ev=(--data "$3")
    # 44943ca: the training code these runs used (unchanged since, up to the cards)
    card=(--data "$3" --made-by "scripts/gpu-vitals.sh, scripts/ship-vitals.sh"
      --hardware "${4:-one lent H100 GPU shared by four runs}" --commit "${5:-44943ca}")
  fi
  [ -f "$run/agreement_${t}_record_test.json" ] ||
    $L evaluate "$run/best.pt" --baseline --device cpu "${ev[@]}"
  $L export "$run/best.pt" --onnx "liquid_stream/models/$name.onnx" --chunk 125 --sub-block 1 --verify \
    --verify-length 8000
  $PY scripts/vitals_card.py "$run" "$name" "$(printf '%s\n' "${CMDS[@]}")" "${card[@]}"
  CMDS=()
}
ship_mean() {  # ship_mean NAME DATA HARDWARE RUN RUN2...: the mean of the runs' estimates as
  # one graph (an ensemble), scored by `evaluate --mean`, with its card; with WEIGHTS=W0,W1,...
  # (chosen by the command WEIGHTS_BY) their weighted mean
  local name=$1 data=$2 hw=$3 t=${1##*-}; shift 3
  local out="runs/ens/$name" ck=() w=() card=()
  for r in "$@"; do ck+=("$r/best.pt"); done
  if [ -n "${WEIGHTS:-}" ]; then w=(--weights "$WEIGHTS") card=(--weights-by "$WEIGHTS_BY"); fi
  [ -f "$out/agreement_${t}_record_test.json" ] ||
    $L evaluate "${ck[@]}" --mean "${w[@]}" --out "$out" --baseline --device cpu --data "$data"
  $L export "${ck[@]}" --onnx "liquid_stream/models/$name.onnx" --chunk 125 --sub-block 1 --verify \
    --verify-length 8000 "${w[@]}"
  $PY scripts/vitals_card.py "$1" "$name" "$(printf '%s\n' "${CMDS[@]}")" --data "$data" \
    --made-by scripts/ship-vitals.sh --hardware "$hw" --members "${@:2}" --scored "$out" \
    ${LIGHTER:+--lighter-than "$LIGHTER"} "${w[@]}" "${card[@]}"
  CMDS=()
}
pair_pass() {  # pair_pass OUT INIT0 INIT1 ARGS...: one pass of crops for each seed of a
  # PPG + ECG pair (target $t, seed 1's settings S1), OUT-m0 from INIT0 and OUT-m1 from INIT1
  local out=$1 i0=$2 i1=$3; shift 3
  train "$out-m0" --target $t --preset ppg+ecg "${V12[@]}" "${CROPS[@]}" --data "$R12" \
    --set train.progress=false --set train.init="$i0" "$@"
  train "$out-m1" "${S1[@]}" "${CROPS[@]}" --set train.progress=false --set train.init="$i1" "$@"
}
py_once() {  # py_once OUT SCRIPT ARGS...: `python SCRIPT ARGS` for the card, run unless OUT exists
  local out=$1; shift
  CMDS+=("python $*")
  [ -e "$out" ] || $PY "$@"
}
recover() {  # recover COMMIT NAME OUT.pt: the weights of liquid_stream/models/NAME.onnx as of
  # COMMIT as a checkpoint (an ensemble's members as OUT-m<i>.pt)
  local src="${3%.pt}-$1.onnx"
  CMDS+=("git show $1:liquid_stream/models/$2.onnx > $src"
    "python scripts/checkpoint_from_onnx.py $src $3")
  [ -f "$src" ] || { mkdir -p "$(dirname "$3")"; git show "$1:liquid_stream/models/$2.onnx" > "$src"; }
  ls "$3" "${3%.pt}"-m*.pt > /dev/null 2>&1 || $PY scripts/checkpoint_from_onnx.py "$src" "$3"
}
gpu() {  # gpu NAME PRESET TARGET [BOTH-STAGE ARGS] [STAGE-2 ARGS]: a gpu-vitals.sh run's commands
  local r=/tmp/gv/$1 both=${4:+ $4}
  CMDS=("liquid-stream data bidmc-sim /tmp/gv/sim999 --records 999 --minutes 4 --seed 3 --randomised --workers 16"
    "liquid-stream train bidmc --preset $2 --target $3 --data /tmp/gv/sim999 --device cuda --out $r-1 --set optim.batch_size=64 --set optim.epochs=8 --set train.threads=2 --set train.progress=false$both"
    "liquid-stream train bidmc --preset $2 --target $3 --data /tmp/gv/sim999 --device cuda --out $r-2 --set train.init=$r-1/best.pt --set optim.lr=0.002 --set data.crop_s=192 --set data.crop_hop_s=48 --set optim.batch_size=16 --set optim.epochs=15 --set optim.warmup_steps=50 --set train.threads=2 --set train.progress=false$both${5:+ $5}")
}
# vitals-ppg-rr (6 x 128): from the GPU runs
# (scripts/gpu-vitals.sh; its output folder copied to GPU), their record set regenerated here
SIM=runs/sim/s3-999
[ -f "$SIM/params.json" ] || $L data bidmc-sim "$SIM" --records 999 --minutes 4 --seed 3 --randomised
gpu ppg-rr-big ppg rr "--set model.d_model=128 --set model.n_layers=6"
# (2 more epochs of crops on the CPU, lr 0.001 annealed, did not help it: validation 2.637 vs
# 2.638 breaths/min.) Since 2026-12-01: one more pass of crops on the CPU with the pulse-shape
# equaliser at ±6 dB (as the PPG + ECG RR members' last pass), from the GPU run's weights as
# shipped until then (recovered from that graph: the GPU run's checkpoint was not on the
# machine); chosen on the selection set, 2.136 -> 2.057 breaths/min (the same pass at ±12 dB:
# 2.188; docs/benchmarks.md §5.2).
recover de964f7 vitals-ppg-rr runs/prr/shipped.pt
THREADS=1
train runs/prr/eq6 --target rr --preset ppg --data "$SIM" --set model.d_model=128 \
  --set model.n_layers=6 --set train.init=runs/prr/shipped.pt --set data.crop_s=192 \
  --set data.crop_hop_s=24 --set optim.batch_size=8 --set optim.epochs=1 --set optim.lr=0.0005 \
  --set data.pulse_eq=0.5 --set data.pulse_eq_db=6
ship runs/prr/eq6 vitals-ppg-rr "$SIM" "2 CPU cores shared with other runs" cac2d0e
# The main job's run (runs/mj12, 2026-11-29) trained stages 1 and 2 (two threads; the main job
# now names stage 2 train-T-stream and stage 3 train-T); stage 3 ran
# on the same records (runs/v3k/records: the same command's output, seed 0) with one thread.
MJ=runs/mj12/vitals
R12=runs/v3k/records
[ -f "$R12/params.json" ] || $L data bidmc-sim "$R12" --records 2997 --minutes 4 --randomised --workers 2
[ -d "$MJ/records" ] || { mkdir -p "$MJ"; cp -al "$R12" "$MJ/records"; }
# the stack at 12.5 Hz: main_job.VITALS_12HZ when these ran
V12=(--set model.frontend.hop=10 --set model.decoder_window=400 --set model.dt_min=0.002
  --set model.dt_max=0.2 --set model.dropout=0)
CROPS=(--set data.crop_s=192 --set data.crop_hop_s=24 --set optim.batch_size=8 --set optim.epochs=1)
for t in hr rr; do
  CMDS=("liquid-stream data bidmc-sim $MJ/records --records 2997 --minutes 4 --randomised --workers 2")
  off=(); [ $t = hr ] && off=(--set data.channel_off=0.3)  # main_job.CHANNEL_OFF
  THREADS=2
  train "$MJ/train-$t-windows" --target $t --preset ppg+ecg "${V12[@]}" --set optim.epochs=1 \
    --set data.hop=1050 --data "$MJ/records"
  train "$MJ/train-$t" --target $t --preset ppg+ecg "${V12[@]}" "${CROPS[@]}" --set optim.lr=0.002 \
    --data "$MJ/records" --set train.init="$MJ/train-$t-windows/best.pt"
  THREADS=1
  train "runs/s12/pe-$t-2" --target $t --preset ppg+ecg "${V12[@]}" "${CROPS[@]}" --set optim.lr=0.001 \
    --data "$R12" --set train.init="$MJ/train-$t/best.pt" "${off[@]}"
  last="runs/s12/pe-$t-2"
  if [ $t = hr ]; then  # a fourth pass, lr 0.0005 (own validation 1.89 -> 1.86 bpm; RR's
    # 2.514 -> 2.502 breaths/min, selection set 1.867 -> 1.849: not shipped, too small)
    train runs/s12/pe-hr-3 --target hr --preset ppg+ecg "${V12[@]}" "${CROPS[@]}" --set optim.lr=0.0005 \
      --data "$R12" --set train.init=runs/s12/pe-hr-2/best.pt "${off[@]}"
    last=runs/s12/pe-hr-3
  fi
  EQ6=(--set optim.lr=0.0005 --set data.pulse_eq=0.5 --set data.pulse_eq_db=6)
  if [ $t = rr ]; then  # a fourth pass with the pulse-shape equaliser at ±6 dB (HR's at
    # ±6 dB lost on the selection set, 1.588 against 1.537; RR's pair won: 1.692 against
    # 1.733 breaths/min, seed 13 1.872 against 1.89; docs/benchmarks.md §5.2)
    train runs/s12/pe-rr-eq6 --target rr --preset ppg+ecg "${V12[@]}" "${CROPS[@]}" --data "$R12" \
      --set train.init=runs/s12/pe-rr-2/best.pt "${EQ6[@]}"
    last=runs/s12/pe-rr-eq6
  fi
  # A second member: the same stages from seed 1, holding out the same records
  # (data.split_seed=0); the shipped graph is the mean of the two (export/ensemble.py),
  # chosen on the selection set (HR 1.765 -> 1.62 bpm with the member's third stage, RR
  # 1.867 -> 1.733 breaths/min; docs/benchmarks.md §5.2). Commands: runs/s1/chain*.sh.
  S1=(--target $t --preset ppg+ecg "${V12[@]}" --data "$R12" --set train.seed=1
    --set data.split_seed=0)
  THREADS=$([ $t = hr ] && echo 2 || echo 1)
  train "runs/s1/pe-$t-windows" "${S1[@]}" --set optim.epochs=1 --set data.hop=1050
  train "runs/s1/pe-$t-stream" "${S1[@]}" "${CROPS[@]}" --set optim.lr=0.002 \
    --set train.init="runs/s1/pe-$t-windows/best.pt"
  train "runs/s1/pe-$t-2" "${S1[@]}" "${CROPS[@]}" --set optim.lr=0.001 \
    --set train.init="runs/s1/pe-$t-stream/best.pt" "${off[@]}"
  second="runs/s1/pe-$t-2"
  if [ $t = hr ]; then
    train runs/s1/pe-hr-3 "${S1[@]}" "${CROPS[@]}" --set optim.lr=0.0005 \
      --set train.init=runs/s1/pe-hr-2/best.pt "${off[@]}"
    second=runs/s1/pe-hr-3
  else
    train runs/s1/pe-rr-eq6 "${S1[@]}" "${CROPS[@]}" --set train.init=runs/s1/pe-rr-2/best.pt "${EQ6[@]}"
    second=runs/s1/pe-rr-eq6
  fi
  # Since 2026-12-01: a fifth pass of each member, from the pair shipped before (recovered from
  # its graph: the runs above were not on that machine), at half the last pass's lr: HR its
  # channel-off crops (selection set 1.537 -> 1.480 bpm, then seed 13 1.789 -> 1.685, seed 7
  # 3.470 -> 3.282, own test 2.09 -> 1.98), RR its ±6 dB equaliser (1.679 -> 1.664
  # breaths/min, then 1.869 -> 1.824, 2.292 -> 2.291, own test 2.20 -> 2.20);
  # docs/benchmarks.md §5.2
  recover de964f7 "vitals-ppg-ecg-$t" "runs/prr/pe-$t.pt"
  THREADS=1
  if [ $t = hr ]; then
    P5=(--set optim.lr=0.00025 "${off[@]}") out=runs/prr/pe-hr-4
  else
    P5=(--set optim.lr=0.00025 --set data.pulse_eq=0.5 --set data.pulse_eq_db=6) out=runs/prr/pe-rr-eq6b
  fi
  pair_pass "$out" "runs/prr/pe-$t-m0.pt" "runs/prr/pe-$t-m1.pt" "${P5[@]}"
  last=$out-m0 members=("$out-m1")
  if [ $t = rr ]; then
    # Since 2026-12-02 (03:00-05:00): each pair member one more pass at half its last lr
    # (0.000125, the ±6 dB equaliser); with the third member's fourth pass below, the three:
    # selection set 1.521 -> 1.468 (docs/benchmarks.md §5.2)
    P6=(--set optim.lr=0.000125 --set data.pulse_eq=0.5 --set data.pulse_eq_db=6)
    pair_pass runs/prr/pe-rr-eq6c "$out-m0/best.pt" "$out-m1/best.pt" "${P6[@]}"
    # and (2026-12-02, 07:00) one more at half that (0.0000625), beside B5 below
    P7=(--set optim.lr=0.0000625 --set data.pulse_eq=0.5 --set data.pulse_eq_db=6)
    pair_pass runs/prr/pe-rr-eq6d runs/prr/pe-rr-eq6c-m0/best.pt runs/prr/pe-rr-eq6c-m1/best.pt \
      "${P7[@]}"
    last=runs/prr/pe-rr-eq6d-m0 members=(runs/prr/pe-rr-eq6d-m1)
    # the pair alone, shipped as the lighter alternative (what vitals-ppg-ecg-rr was until
    # 2026-12-02: a quarter of the three's cost per bed, docs/serving.md §8); the eq6b pair
    # until 2026-12-02 08:00, then this one (selection set 1.664 -> 1.616; eq6c: 1.646)
    pair_cmds=("${CMDS[@]}")
    LIGHTER=vitals-ppg-ecg-rr ship_mean vitals-ppg-ecg-rr-lite "$R12" \
      "2 CPU cores shared with other runs" "$last" "${members[@]}"
    CMDS=("${pair_cmds[@]}")
    # Since 2026-12-02: a third member, the 6 x 128 PPG RR model (vitals-ppg-rr, runs/prr/eq6,
    # made above) widened to PLETH + II (II's encoder column zero, so it starts as the PPG
    # model: scripts/widen_channels.py), then one pass of crops with the ±6 dB equaliser on
    # these records (lr 0.0005; 0.001 beside it: 1.728 alone on the selection set against
    # 1.684). The three: selection set 1.664 -> 1.549 breaths/min, then seed 13 1.824 -> 1.605,
    # seed 7 2.291 -> 2.049, own test 2.20 -> 2.03 (docs/benchmarks.md §5.2)
    py_once runs/prr/ppg-rr-ii.pt scripts/widen_channels.py runs/prr/eq6/best.pt \
      runs/prr/ppg-rr-ii.pt --channels PLETH,II
    W=(--target rr --preset ppg+ecg --data "$R12" --set model.d_model=128 --set model.n_layers=6
      "${CROPS[@]}" --set data.pulse_eq=0.5 --set data.pulse_eq_db=6)
    train runs/wrr/B "${W[@]}" --set train.init=runs/prr/ppg-rr-ii.pt --set optim.lr=0.0005
    # and a second pass at half that lr (0.0005 again beside it: 1.540 on the selection set);
    # the three: 1.549 -> 1.521, seed 13 1.605 -> 1.600, seed 7 2.049 -> 1.909, own test 2.03 -> 2.05 (docs/benchmarks.md §5.2)
    train runs/wrr/B2 "${W[@]}" --set train.init=runs/wrr/B/best.pt --set optim.lr=0.00025 \
      --set train.progress=false
    # then two more, each at half the lr of the one before (selection set, with the pair
    # above: B3 1.490, B4 1.468; B4 with the pair before its last pass 1.479)
    train runs/wrr/B3 "${W[@]}" --set train.init=runs/wrr/B2/best.pt --set optim.lr=0.000125 \
      --set train.progress=false
    train runs/wrr/B4 "${W[@]}" --set train.init=runs/wrr/B3/best.pt --set optim.lr=0.0000625 \
      --set train.progress=false
    # and a fifth (2026-12-02, 07:00; B5 with the pair's eq6d pass above)
    train runs/wrr/B5 "${W[@]}" --set train.init=runs/wrr/B4/best.pt --set optim.lr=0.00003125 \
      --set train.progress=false
    members+=(runs/wrr/B5)
    # Since 2026-12-02 (06:30): the three weighted (each member exported alone, streamed over
    # the selection set; the two seeds of one recipe share a weight): 0.2, 0.2, 0.6; the
    # selection set, eq6c + B4: 1.468 -> 1.419; then with the last passes, each combination
    # weighted by the same bench: eq6c + B4 1.419, eq6d + B4 1.408, eq6c + B5 1.401 (0.175,
    # 0.175, 0.65), eq6d + B5 1.391 (docs/benchmarks.md §5.2)
    sel=()
    for r in "$last" "${members[@]}"; do
      CMDS+=("liquid-stream export $r/best.pt --onnx runs/wt/${r##*/}.onnx --chunk 125 --sub-block 1")
      [ -f "runs/wt/${r##*/}.onnx" ] ||
        $L export "$r/best.pt" --onnx "runs/wt/${r##*/}.onnx" --chunk 125 --sub-block 1
      sel+=("runs/wt/${r##*/}.onnx")
    done
    WEIGHTS_BY="python bench/ensemble_weights.py ${sel[*]} --records runs/sim/sel-s9 --groups 0,0,1"
    CMDS+=("$WEIGHTS_BY")
    WEIGHTS=0.2,0.2,0.6  # its choice (the bench prints --weights)
    # Since 2026-12-07: one more pass of each of the three, from the graph shipped before
    # (recovered from it), with 400 records whose base RR sits at the ends of the range
    # (6-9 and 34-37 breaths/min, seed 31) added to the training split only
    # (data.extra_train: the record split, hence the own test records, unchanged); lr 0.000125,
    # the ±6 dB equaliser, one thread each. Selection set, each weighted by the same bench:
    # the graph before 1.391, the new pair with B5 1.372, the pair before with the new wide
    # member 1.318, all three new 1.311 at 0.15, 0.15, 0.7 (docs/benchmarks.md §5.2); the new
    # pair alone 1.607 against 1.617, too small a gain to replace vitals-ppg-ecg-rr-lite
    recover 15a4bd9 vitals-ppg-ecg-rr runs/prr/ship-rr.pt
    EDGE=runs/edge/s31-400
    CMDS+=("liquid-stream data bidmc-sim $EDGE --records 400 --minutes 4 --randomised --rr-base 6:9,34:37 --seed 31 --workers 2")
    [ -f "$EDGE/params.json" ] || $L data bidmc-sim "$EDGE" --records 400 --minutes 4 --randomised \
      --rr-base 6:9,34:37 --seed 31 --workers 2
    PE=(--set optim.lr=0.000125 --set data.pulse_eq=0.5 --set data.pulse_eq_db=6
      --set "data.extra_train=[$EDGE]" --set train.progress=false)
    pair_pass runs/edge/rr runs/prr/ship-rr-m0.pt runs/prr/ship-rr-m1.pt "${PE[@]}"
    train runs/edge/rr-B "${W[@]}" --set train.init=runs/prr/ship-rr-m2.pt "${PE[@]}"
    last=runs/edge/rr-m0 members=(runs/edge/rr-m1 runs/edge/rr-B) sel=()
    for r in "$last" "${members[@]}"; do
      o=runs/wt/edge-${r##*-}.onnx  # edge-m0, edge-m1, edge-B
      CMDS+=("liquid-stream export $r/best.pt --onnx $o --chunk 125 --sub-block 1")
      [ -f "$o" ] || $L export "$r/best.pt" --onnx "$o" --chunk 125 --sub-block 1
      sel+=("$o")
    done
    WEIGHTS_BY="python bench/ensemble_weights.py ${sel[*]} --records runs/sim/sel-s9 --groups 0,0,1 --cache runs/edge/cache"
    CMDS+=("$WEIGHTS_BY")
    WEIGHTS=0.15,0.15,0.7
  fi
  ship_mean "vitals-ppg-ecg-$t" "$R12" "2 CPU cores shared with other runs" "$last" "${members[@]}"
  WEIGHTS= WEIGHTS_BY=
done
# vitals-ppg-hr: the same stages with --preset ppg (PLETH only), one thread each
CMDS=("liquid-stream data bidmc-sim $R12 --records 2997 --minutes 4 --randomised --workers 2")
P=(--target hr --preset ppg "${V12[@]}" --data "$R12")
train runs/s12/ppg-hr-windows "${P[@]}" --set optim.epochs=1 --set data.hop=1050
train runs/s12/ppg-hr "${P[@]}" "${CROPS[@]}" --set optim.lr=0.002 --set train.init=runs/s12/ppg-hr-windows/best.pt
train runs/s12/ppg-hr-2 "${P[@]}" "${CROPS[@]}" --set optim.lr=0.001 --set train.init=runs/s12/ppg-hr/best.pt
train runs/s12/ppg-hr-3 "${P[@]}" "${CROPS[@]}" --set optim.lr=0.0005 --set train.init=runs/s12/ppg-hr-2/best.pt
# A fourth pass with the pulse-shape augmentation (data.pulse_eq=0.5, training/data/vitals/pulse_eq.py),
# chosen on the selection set: RMSE 3.32 (ppg-hr-3, shipped before) -> 2.48 bpm; the same
# pass without it 3.30 (runs/xg/ppg-hr-4; scripts/xgen-pulse-eq.sh, docs/benchmarks.md §5.2).
train runs/s12/ppg-hr-eq "${P[@]}" "${CROPS[@]}" --set optim.lr=0.0005 --set data.pulse_eq=0.5 \
  --set train.init=runs/s12/ppg-hr-3/best.pt
# Since 2026-12-01: one more such pass at half its lr (0.00025), from the model shipped before
# (recovered from its graph); selection set 2.481 -> 2.366 bpm, then seed 13 2.059 -> 2.063,
# seed 7 3.732 -> 3.396, own test 1.93 -> 2.00 (docs/benchmarks.md §5.2).
recover de964f7 vitals-ppg-hr runs/prr/ppg-hr.pt
train runs/prr/ppg-hr-eq2 "${P[@]}" "${CROPS[@]}" --set optim.lr=0.00025 --set data.pulse_eq=0.5 \
  --set train.init=runs/prr/ppg-hr.pt --set train.progress=false
ship runs/prr/ppg-hr-eq2 vitals-ppg-hr "$R12" "2 CPU cores shared with other runs" cac2d0e
# vitals-oximeter-spo2 (2 CPU cores): SpO2 from the oximeter's raw IR and red intensities
# (simulator revision 2; one PLETH does not carry SpO2 under randomised pulse shapes:
# `python bench/spo2_cue.py`): the log scale-norm front end with a shared scale (the ratio of
# ratios survives), 32 s windows of 999 records (seed 3), then warm-started as a stream.
OX=runs/sim/ox-s3-999
[ -f "$OX/params.json" ] || $L data bidmc-sim "$OX" --records 999 --minutes 4 --seed 3 --randomised --workers 2
CMDS=("liquid-stream data bidmc-sim $OX --records 999 --minutes 4 --seed 3 --randomised --workers 2")
THREADS=2  # the two runs had the machine to themselves
SPO2=(--preset ppg --target spo2 --data "$OX")
train runs/ox/spo2-1 "${SPO2[@]}" --set data.hop=1000 --set optim.epochs=4
train runs/ox/spo2-2 "${SPO2[@]}" --set train.init=runs/ox/spo2-1/best.pt --set optim.lr=0.002 \
  --set data.crop_s=192 --set data.crop_hop_s=48 --set optim.batch_size=16 --set optim.epochs=6 \
  --set optim.warmup_steps=50
# (6f9eb83: the code of these runs, committed while the first one ran, unchanged since)
ship runs/ox/spo2-2 vitals-oximeter-spo2 "$OX" "2 CPU cores" 6f9eb83

# vitals-resp-rr (issue 64): RR from a respiration channel, 12.5 Hz settings, one thread.
# Its card (liquid_stream/models/vitals-resp-rr.md) is written by hand in the Hugging Face
# form with its real-recording results, so this part exports and does not call `ship`.
S12=(--set model.frontend.hop=10 --set model.decoder_window=400 --set model.dt_min=0.002
  --set model.dt_max=0.2 --set model.dropout=0)
[ -d runs/ecgx/s0-1500 ] || $L data bidmc-sim runs/ecgx/s0-1500 --records 1500 --minutes 4 \
  --randomised --seed 0 --workers 2
RESP_RR=(--target rr --preset resp "${S12[@]}" --data runs/ecgx/s0-1500)
train runs/resp/windows "${RESP_RR[@]}" --set optim.epochs=1 --set data.hop=1050
CROPS=(--set data.crop_s=192 --set data.crop_hop_s=24 --set optim.batch_size=8 --set optim.epochs=1)
train runs/resp/stream "${RESP_RR[@]}" "${CROPS[@]}" --set optim.lr=0.002 \
  --set train.init=runs/resp/windows/best.pt
train runs/resp/stream-2 "${RESP_RR[@]}" "${CROPS[@]}" --set optim.lr=0.0005 \
  --set train.init=runs/resp/stream/best.pt
$L evaluate runs/resp/stream-2/best.pt --baseline --device cpu --data runs/ecgx/s0-1500
$L export runs/resp/stream-2/best.pt --onnx liquid_stream/models/vitals-resp-rr.onnx --chunk 125 \
  --sub-block 1 --verify --verify-length 8000
# vitals-ecg-hr (II alone, issue 64 item 3; 2026-12-08, one thread per run, 2 CPU cores):
# from scratch on the 1500 randomised records of seed 0 with 1800 ectopy-rich records in the
# training split only, the scale-norm front end's slope features on (a pooled QRS is not
# cancelled by its own S wave); chosen on the selection sets (ectopy-rich seed 19, randomised
# seed 9) among the passes of experiments/2026-12-08-ecg-slope (run.sh, result.md). Its card
# (liquid_stream/models/vitals-ecg-hr.md) is written by hand with its real-recording results.
# (Tried before and not shipped: experiments/2026-12-07-ecg-hr, -ecg-beat-count.)
ECG=runs/ecgb
[ -f $ECG/s0-1500/params.json ] || $L data bidmc-sim $ECG/s0-1500 --records 1500 --minutes 4 \
  --randomised --seed 0 --workers 2
[ -f $ECG/rich-s41-600/params.json ] || $L data bidmc-sim $ECG/rich-s41-600 --records 600 \
  --minutes 4 --randomised --ectopy rich --seed 41 --workers 2
[ -f $ECG/rich-s43-1200/params.json ] || $L data bidmc-sim $ECG/rich-s43-1200 --records 1200 \
  --minutes 4 --randomised --ectopy rich --seed 43 --workers 2
ECG_HR=(--target hr --preset ecg "${S12[@]}" --data $ECG/s0-1500 --set model.frontend.slope=true
  --set data.crop_s=192 --set data.crop_hop_s=24 --set optim.batch_size=8
  --set "data.extra_train=[$ECG/rich-s41-600,$ECG/rich-s43-1200]" --set train.progress=false)
train runs/ecgs/f1 "${ECG_HR[@]}" --set optim.epochs=4
train runs/ecgs/f2a "${ECG_HR[@]}" --set optim.epochs=3 --set optim.lr=0.001 \
  --set train.init=runs/ecgs/f1/last.pt
$L export runs/ecgs/f2a/last.pt --onnx liquid_stream/models/vitals-ecg-hr.onnx --chunk 125 \
  --sub-block 1 --verify --verify-length 8000
