"""Write the model card of a shipped vital-sign model from its run folder.

    python scripts/vitals_card.py RUN NAME "COMMAND" [--commit SHA] [--data ROOT]
        [--made-by SCRIPT] [--hardware TEXT] [--members RUN2 ... --scored DIR
        [--weights W0,W1,... --weights-by "COMMAND"]]

RUN is a `liquid-stream train bidmc` output folder that `liquid-stream evaluate --baseline`
has scored (agreement_<target>_record_test.json); NAME the shipped file's stem
(liquid_stream/models/NAME.onnx); COMMAND the training command, quoted. ROOT: the record set
the run trained on when it was given one (`--data`; its params.json names the simulator's
arguments), else the config's data.sim_* are. An ensemble (the mean of RUN's and the
``--members`` runs' estimates, one graph: export/ensemble.py) is scored by `liquid-stream
evaluate RUN/best.pt RUN2/best.pt ... --mean --out DIR --baseline`, and ``--scored DIR``
names that folder; with ``--weights`` (and the command that chose them, ``--weights-by``)
the graph and the evaluation take the members' weighted mean. Every number on the card is
read from the runs and that evaluation, so the card says what they measured and nothing
else.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import yaml

from liquid_stream.io.bidmc_vocab import WITHIN
from liquid_stream.training.data.vitals.bidmc_baseline import baseline_name
from liquid_stream.training.data.vitals.pulse_eq import gain_bound_db

MODELS = Path(__file__).resolve().parents[1] / "liquid_stream" / "models"


def epochs(n: int) -> str:
    return f"{n} epoch{'s' * (n != 1)}"


def stack(m: dict) -> str:
    """The layers of a model config after its front end, in words."""
    return (
        f"{m['n_layers']} pre-norm blocks of S4D (H = {m['d_model']}, N = {m['d_state']}), PB "
        f"liquid term\np = {m['liquid_order']}, LayerNorm → {m['decoder_window']}-frame window "
        "decoder"
    )


def fmt(v: float, pct: bool = False) -> str:
    return f"{100 * v:.1f} %" if pct else f"{v:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("name")
    ap.add_argument("command")
    ap.add_argument("--commit", default=None)
    ap.add_argument("--data", type=Path, default=None, help="the run's record set (--data)")
    ap.add_argument("--made-by", default="scripts/ship-vitals.sh")
    ap.add_argument("--hardware", default="2 CPU cores shared with other jobs")
    ap.add_argument(
        "--lighter-than",
        default=None,
        metavar="NAME",
        help="this model is a cheaper alternative to the shipped NAME",
    )
    ap.add_argument(
        "--members",
        type=Path,
        nargs="*",
        default=[],
        help="further runs averaged with RUN (an ensemble)",
    )
    ap.add_argument(
        "--scored", type=Path, default=None, help="the ensemble's `evaluate --mean --out` folder"
    )
    ap.add_argument("--weights", default=None, help="the ensemble's weights (W0,W1,...)")
    ap.add_argument("--weights-by", default=None, help="the command that chose the weights")
    a = ap.parse_args()
    if bool(a.members) != (a.scored is not None):
        ap.error("--members and --scored go together")
    if (a.weights is None) != (a.weights_by is None) or (a.weights and not a.members):
        ap.error("--weights and --weights-by go together, with --members")
    runs = [a.run, *a.members]
    cfgs = [yaml.safe_load((r / "config.yaml").read_text()) for r in runs]
    cfg = cfgs[0]
    t = cfg["data"]["target"]
    res = json.loads(((a.scored or a.run) / f"agreement_{t}_record_test.json").read_text())
    seeds = [c["train"]["seed"] for c in cfgs]
    rows = [line.split(",") for line in (a.run / "metrics.csv").read_text().splitlines()]
    last = dict(zip(rows[0], rows[-1], strict=True))
    commit = (
        a.commit
        or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    m, d = cfg["model"], cfg["data"]
    sim = {"records": d["sim_records"], "minutes": d["sim_minutes"], "seed": d["sim_seed"]}
    if d.get("root") is not None:
        if a.data is None:
            ap.error(f"{a.run} trained on data.root={d['root']}: name that set with --data")
        sim = json.loads((a.data / "params.json").read_text())
    planned, done = int(cfg["optim"]["epochs"]), int(float(last["epoch"]))
    cut = f" (stopped early; {planned} planned)" if done < planned else ""
    u, tol = res["units"], f"{WITHIN[t]:g}"
    base = res.get("baseline_n", 0) > 0
    fe = m["frontend"]
    oximeter = bool(fe.get("log"))  # the oximeter's raw intensities (IR, RED)
    bname = baseline_name(t)  # the classical baseline
    label = {"spo2": "SpO2"}.get(t, t.upper())
    table = [
        f"| | model | {bname} (same windows) |",
        "|---|---|---|",
        f"| RMSE ({u}) | **{fmt(res['rmse'])}** | {fmt(res['baseline_rmse']) if base else 'n/a'} |",
        f"| MAE ({u}) | {fmt(res['mae'])} | {fmt(res['baseline_mae']) if base else 'n/a'} |",
        f"| bias ({u}) | {res['bias']:+.2f} | "
        + (f"{res['baseline_bias']:+.2f} |" if base else "n/a |"),
        f"| within ±{tol} {u} | {fmt(res['within'], True)} | "
        + (f"{fmt(res['baseline_within'], True)} |" if base else "n/a |"),
        f"| slope (estimate vs truth) | {res['slope']:.3f} | "
        + (f"{res['baseline_slope']:.3f} |" if base else "n/a |"),
    ]
    st = res.get("stream")
    if st:
        table = [
            f"Streamed as the monitor runs it (each test record from its start, every second "
            f"against the trailing {d['window'] / d['sample_rate']:g} s label, "
            f"{st['n']} s): **RMSE {fmt(st['rmse'])} {u}**, MAE {fmt(st['mae'])}, "
            f"bias {st['bias']:+.2f}, within ±{tol} {u} {fmt(st['within'], True)}.",
            "",
            f"On {d['window'] / d['sample_rate']:g} s windows from a zero state:",
            "",
            *table,
        ]
    by = res.get("by_condition") or {}
    conditions = ""
    if by:
        lines = [
            "\nBy condition of the test records (a window may have several; RMSE in "
            f"{u}, share within ±{tol} {u}):\n",
            f"| condition | windows | model RMSE | within | {bname} RMSE | within |",
            "|---|---|---|---|---|---|",
        ]
        for k, r in by.items():
            nk = (
                f"{fmt(r['baseline_rmse'])} | {fmt(r['baseline_within'], True)}"
                if "baseline_rmse" in r
                else "n/a | n/a"
            )
            lines.append(f"| {k} | {r['n']} | {fmt(r['rmse'])} | {fmt(r['within'], True)} | {nk} |")
        conditions = "\n".join(lines) + "\n"
    init = cfg["train"].get("init")
    warm = ""
    if init:  # a run folder's checkpoint, or e.g. weights recovered from a shipped graph
        run_init = (Path(init).parent / "config.yaml").is_file()
        what = (
            "the run of the command before it (its records: that run's config)"
            if run_init
            else "the checkpoint the command before it wrote (the weights of the graph shipped "
            "before, scripts/checkpoint_from_onnx.py)"
        )
        whose = "both runs' sets" if run_init else "the last run's set"
        warm = (
            f"\nThe last run is a warm start (`train.init`) from `{init}`, {what}, keeping that "
            f"checkpoint's data constants; the test records of {whose} were never trained on."
        )
    before = a.run.parent / Path(init or ".").parent.name / "metrics.csv"  # a sibling run
    if init and before.is_file():
        rows0 = [line.split(",") for line in before.read_text().splitlines()]
        last0 = dict(zip(rows0[0], rows0[-1], strict=True))
        cfg0 = yaml.safe_load((before.parent / "config.yaml").read_text())
        done0, planned0 = int(float(last0["epoch"])), int(cfg0["optim"]["epochs"])
        cut0 = f" (stopped early; {planned0} planned)" if done0 < planned0 else ""
        warm += f" That run: {epochs(done0)}{cut0} ({last0['step']} steps)."
    eq = float(cfg["data"].get("pulse_eq") or 0)
    if eq > 0:
        db = gain_bound_db(cfg["data"].get("pulse_eq_db"))
        warm += (
            f" The last run passed {eq * 100:g} % of its crops, per epoch, through a random "
            f"equaliser of the cardiac band (`data.pulse_eq`, knot gains within ±{db:g} dB, "
            "training/data/vitals/pulse_eq.py: another pulse morphology, the same beats), toward "
            "pulse shapes the simulator does not draw; what it gains and costs: "
            "docs/benchmarks.md §5.3 (the study: docs/archive/benchmarks-history.md §5.2)."
        )
    data_arg = f" --data {a.data}" if a.data is not None else ""
    ckpts = " ".join(f"{r}/best.pt" for r in runs)
    weights = f" --weights {a.weights}" if a.weights else ""
    mean = f" --mean{weights} --out {a.scored}" if a.members else ""
    evaluate = f"liquid-stream evaluate {ckpts}{mean} --baseline --device cpu"
    archs = [(c["model"]["frontend"]["hop"], stack(c["model"])) for c in cfgs]
    kinds = (
        "such models"
        if len(set(archs)) == 1
        else "models ("
        + "; ".join(
            f"member {i + 1}, `{r}`: front end pooled by {hop} to "
            f"{d['sample_rate'] / hop:g} Hz, {x}"
            for i, (r, (hop, x)) in enumerate(zip(runs, archs, strict=True))
            if (hop, x) != archs[0]
        )
        + "; the others as above)"
    )
    ensemble = (
        f"\n\n**An ensemble:** the graph runs {len(runs)} {kinds} side by side and outputs "
        + (
            f"the weighted mean of their estimates (weights {a.weights.replace(',', ', ')}, "
            f"chosen on held-out records of another simulator seed by `{a.weights_by}`; "
            "export/ensemble.py)"
            if a.weights
            else "the mean of their estimates (export/ensemble.py)"
        )
        + "; they were trained from seeds "
        f"{', '.join(str(x) for x in seeds)} on the same records with the same record split "
        f"(`data.split_seed`), so every number below is the {'weighted ' * bool(a.weights)}"
        "mean's, on records none of them saw."
        if a.members
        else ""
    )
    extra = ""
    for r in dict.fromkeys(x for c in cfgs for x in c["data"].get("extra_train") or []):
        doc = json.loads((Path(r) / "params.json").read_text())
        spans = ", ".join(f"{lo:g}–{hi:g}" for lo, hi in doc.get("rr_base", [[8, 35]]))
        extra += (
            f"\nThe last pass added {doc['records']} records of {doc['minutes']:g} min to the "
            f"training split only (`data.extra_train={r}`), seed {doc['seed']}, base RR drawn "
            f"from {spans} breaths/min (the ends of the range; the others draw 8–35)."
        )
    if oximeter:
        units = (
            "with **any gain** per channel (the log scale-norm front end: ln of each "
            "channel's ratio to its first sample, both channels over the first one's "
            "running RMS, so the ratio of ratios survives; an offset is not removed: "
            "an intensity has a physical zero)"
        )
        front = f"log scale-norm front end, shared scale (τ = {fe['tau_s']:g} s"
        signals = (
            "\nThe inputs are the oximeter's raw IR and red intensities (Beer-Lambert, "
            "ratio of ratios R = (110 − SpO2) / 25 for\nthe arterial pulse; venous "
            "pulsation, motion and wander with their own ratios; gain, no offset)."
        )
        reads = (
            "The classical ratio of ratios (training/data/vitals/bidmc_baseline.py: band-passed "
            "log intensities, R the median of 4 s segments' least-squares ratios, 110 − 25 R) "
            "reads the same windows."
        )
    else:
        units = (
            "in **any units**\n(the scale-normalisation front end standardises each channel "
            "by its running mean and RMS)"
        )
        front = f"scale-norm front end (τ = {fe['tau_s']:g} s"
        signals = ""
        reads = (
            "NeuroKit2 reads the same channels as the model\n(RR: the record's RESP "
            "channel, which no model sees — an advantage for the baseline)."
        )
    spo2_limit = (
        "- The SpO2 calibration is the simulator's (the textbook line R = (110 − SpO2) / 25);\n"
        "  every real oximeter has its own curve, so this model needs recalibrating on a\n"
        "  device's own data before its numbers mean anything there."
        if t == "spo2"
        else "- SpO2 is not estimated from a single PPG: it needs the oximeter's IR and red\n"
        "  channels (the `vitals-oximeter-spo2` model)."
    )
    role = (
        f"A lighter alternative to `{a.lighter_than}`, which `liquid-stream vitals --record R`\n"
        f"uses when no MODEL is given: it costs less per stream (for a server that hosts many\n"
        f"beds, docs/serving.md) and is less accurate (compare the cards); pass it as MODEL.\n"
        if a.lighter_than
        else "`liquid-stream vitals --record R` uses this model when no MODEL is given and the "
        f"record has\n{' and '.join(d['channels'])}. "
    )
    text = f"""# {a.name} — streaming {label} estimator ({" + ".join(d["channels"])})

{role}ONNX, raw samples at {d["sample_rate"]} Hz {units},
any chunk size; one {label} estimate ({u}) per input sample: the mean over the trailing
{d["window"] / d["sample_rate"]:g} s window.

## Model
Causal Liquid-S4: {front}, pooled by
{fe["hop"]} to {d["sample_rate"] / fe["hop"]:g} Hz) → Linear →
{archs[0][1]} → {t}.{ensemble}

## Data
Synthetic only: {sim["records"]} domain-randomised records of {sim["minutes"]:g} min, seed
{sim["seed"]} (`liquid-stream data bidmc-sim --randomised`, training/data/vitals/vitals_sim.py:
HR 40–180, RR 6–40, SpO2 80–100, ectopic beats and AF, two morphology families, noise, motion,
sensor-off stretches, random gain / offset / ADC per channel), split by record 70/15/15;
{d["window"]}-sample windows every {d["hop"]} samples.{extra}{signals}

## How it was made (`{a.made_by}`)
```sh
{a.command}
{evaluate}{data_arg}
liquid-stream export {ckpts} --onnx {a.name}.onnx --chunk 125 --sub-block 1 \\
  --verify --verify-length 8000{weights}
```
Code: git commit {commit}; {epochs(done)}{cut} ({last["step"]} steps), {a.hardware}.{warm}

## Metrics (held-out test records: never seen in training or model selection)
{res["n"]} windows of the test records. {reads}

{chr(10).join(table)}
{conditions}
## Limits
- **Trained on simulated signals only.** The randomised simulator is the proxy for
  sensors and patients never seen; the few real recordings it was checked on are under
  "Real recordings". Expect larger errors on
  real recordings, and check against a reference before relying on it.
{spo2_limit}
- Not a medical device.
"""
    old = MODELS / f"{a.name}.md"  # the real-recordings section comes from bench/vitals_real.py
    real = "\n## Real recordings\n"
    if old.is_file() and real in (prev := old.read_text()):
        text = text.rstrip("\n") + "\n" + real + prev.split(real, 1)[1]
    (MODELS / f"{a.name}.md").write_text(text)
    print(f"wrote {MODELS / (a.name + '.md')}")


if __name__ == "__main__":
    main()
