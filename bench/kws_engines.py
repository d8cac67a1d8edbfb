"""Leave-one-engine-out (LOEO) keyword spotting: how the log-mel ``cpu`` keyword spotter
does on the voices of a text-to-speech engine it has never heard.

    python bench/kws_engines.py                         # all four engines + the reference
    python bench/kws_engines.py --engines piper --no-reference --epochs 2
    python bench/kws_engines.py --dry-run               # build the roots, print the commands
    python bench/kws_engines.py --engines flite --merge # add an engine to an earlier --out

The synthetic Speech Commands set ``--src`` (default runs/ship/speech, made by
``liquid-stream data speech-synth``) is split by TTS engine: the engine of every clip is
recomputed from its ``.synth-stamp.json`` with ``plan_synth(per_word, words, seed,
n_speakers, engines)`` (the plan is a pure function of the stamp; the script checks that
the plan's files and splits are exactly those on disk). For each held-out engine E it
writes two new v0.02 roots of symlinks to the WAVs of ``--src`` (plus rewritten
``validation_list.txt`` / ``testing_list.txt`` and a symlink to ``_background_noise_``):

  train root (no E)   train / val = the original train / val clips whose engine != E;
                      its testing_list.txt = the original test clips whose engine != E
                      (only for the trainer's end-of-run test metric; not used below)
  test root (only E)  E's clips of ALL original splits (train, val and test) in its
                      testing_list.txt, so the model never heard engine E at all

Then, one after the other (``nice -n 10``, ``--set train.threads=1``):

  liquid-stream train speech-stream --preset cpu --data TRAIN_ROOT --out RUN \\
      --set optim.epochs=EPOCHS --set train.threads=1
  liquid-stream export RUN/best.pt --onnx RUN/kws.onnx --chunk 160
  liquid-stream data kws-stream RUN/val.wav --labels RUN/val.csv --data TRAIN_ROOT \\
      --split validation --minutes VAL_MINUTES --seed 1
  liquid-stream kws-tune RUN/kws.onnx --stream RUN/val.wav --labels RUN/val.csv \\
      --max-fa-per-hour 5
  liquid-stream data kws-stream RUN/test.wav --labels RUN/test.csv --data TEST_ROOT \\
      --minutes MINUTES --seed 2
  liquid-stream kws-eval RUN/kws.onnx --stream RUN/test.wav --labels RUN/test.csv \\
      --out RUN/test.json

The in-domain reference (``--reference``, on by default, run last) trains the same recipe
with the same budget on all engines (``--src`` itself), tunes on its validation stream and
is scored on the normal test split (all engines, test speakers only). It is also scored on
one "in-domain" stream per engine E: a root whose testing_list.txt holds E's clips of the
original TEST split only (speakers the reference never heard, but an engine it has), so
each held-out row has a same-engine row to compare with.

Writes a markdown table (commands on top) to stdout and ``--out`` (.md next to the JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

from liquid_stream.training.data.speech.speech_synth import (
    ENGINES,
    NOISE_DIR,
    STAMP_NAME,
    plan_synth,
)

ROOT = Path(__file__).resolve().parents[1]

CLI = str(ROOT / ".venv" / "bin" / "liquid-stream")
MARKER = ".kws-engines-root.json"  # written into every root this script makes
SC10 = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
ORACLE_FA = (5.0, 40.0)  # FA/h levels of the test-tuned ("oracle") detection rates


# ---------------------------------------------------------------------------- roots


def engine_splits(src: Path) -> dict[str, dict[str, list[str]]]:
    """engine -> split (train / val / test) -> relative WAV paths of ``src``, recomputed
    from its synth stamp and checked against the files and lists on disk."""
    stamp = json.loads((src / STAMP_NAME).read_text())
    jobs, split_of = plan_synth(
        stamp["per_word"], stamp["words"], stamp["seed"], stamp["n_speakers"], stamp["engines"]
    )
    val = set((src / "validation_list.txt").read_text().split())
    test = set((src / "testing_list.txt").read_text().split())
    on_disk = {
        f"{w}/{f}" for w in stamp["words"] for f in os.listdir(src / w) if f.endswith(".wav")
    }
    planned = {j.relpath for j in jobs}
    if planned != on_disk:
        raise SystemExit(
            f"{src}: the plan of its stamp does not match the WAVs on disk "
            f"({len(planned - on_disk)} planned but absent, {len(on_disk - planned)} extra)"
        )
    out: dict[str, dict[str, list[str]]] = {}
    for j in jobs:
        split = split_of[j.voice.speaker_id]
        listed = "val" if j.relpath in val else "test" if j.relpath in test else "train"
        if split != listed:
            raise SystemExit(f"{src}: {j.relpath} is in {listed} but the plan says {split}")
        out.setdefault(j.voice.engine, {"train": [], "val": [], "test": []})[split].append(
            j.relpath
        )
    return {e: {s: sorted(v) for s, v in out[e].items()} for e in ENGINES if e in out}


def make_root(src: Path, dst: Path, splits: dict[str, list[str]], info: dict) -> dict:
    """A v0.02 root at ``dst`` of symlinks to ``src``: every file of ``splits`` linked,
    val / test listed; ``dst`` is replaced only if this script made it (marker file)."""
    if dst.exists():
        if not (dst / MARKER).is_file():
            raise SystemExit(f"{dst} exists and was not made by this script; not replacing it")
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    src = src.resolve()
    for rel in (p for s in ("train", "val", "test") for p in splits.get(s, [])):
        (dst / rel).parent.mkdir(exist_ok=True)
        os.symlink(src / rel, dst / rel)
    (dst / NOISE_DIR).symlink_to(src / NOISE_DIR, target_is_directory=True)
    (dst / "validation_list.txt").write_text("".join(p + "\n" for p in splits.get("val", [])))
    (dst / "testing_list.txt").write_text("".join(p + "\n" for p in splits.get("test", [])))
    counts = {s: len(splits.get(s, [])) for s in ("train", "val", "test")}
    kw = {s: sum(p.split("/")[0] in SC10 for p in splits.get(s, [])) for s in counts}
    meta = {**info, "src": str(src), "clips": counts, "sc10_keyword_clips": kw}
    (dst / MARKER).write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def build_roots(src: Path, work: Path, engines: list[str], by_engine: dict) -> dict:
    """The LOEO train / test roots of each engine and the in-domain per-engine test roots."""
    roots = {}
    for e in engines:
        others = [o for o in by_engine if o != e]
        splits = ("train", "val", "test")
        train = {s: sorted(p for o in others for p in by_engine[o][s]) for s in splits}
        held = {"test": sorted(p for s in splits for p in by_engine[e][s])}
        indomain = {"test": by_engine[e]["test"]}
        roots[e] = {
            "train": make_root(
                src,
                work / "roots" / f"no-{e}",
                train,
                {"kind": "loeo-train", "held_out": e, "engines": others},
            ),
            "test": make_root(
                src,
                work / "roots" / f"only-{e}",
                held,
                {"kind": "loeo-test", "engine": e, "from_splits": "train+val+test"},
            ),
            "indomain_test": make_root(
                src,
                work / "roots" / f"test-{e}",
                indomain,
                {"kind": "indomain-test", "engine": e, "from_splits": "test"},
            ),
        }
    return roots


# ---------------------------------------------------------------------------- running


class Runner:
    def __init__(self, log: Path, dry: bool):
        self.log, self.dry = log, dry
        self.commands: list[str] = []

    def __call__(self, args: list[str], nice: bool = True) -> tuple[str, float]:
        cmd = (["nice", "-n", "10"] if nice else []) + args
        text = shlex.join(cmd).replace(CLI, "liquid-stream")
        self.commands.append(text)
        print(f"$ {text}", flush=True)
        if self.dry:
            return "", 0.0
        t0 = time.perf_counter()
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        dt = time.perf_counter() - t0
        with self.log.open("a") as f:
            f.write(f"$ {text}\n{p.stdout}{p.stderr}[{dt:.1f} s, rc {p.returncode}]\n")
        if p.returncode != 0:
            tail = (p.stdout + p.stderr)[-3000:]
            raise SystemExit(f"failed ({p.returncode}): {text}\n{tail}")
        print(f"  [{dt:.1f} s]", flush=True)
        return p.stdout + p.stderr, dt


def train_export_tune(run: Runner, args, train_root: Path, out: Path) -> dict:
    """Train (the stated budget), export, tune on the train root's validation stream."""
    res: dict = {"run": str(out)}
    if out.exists() and not args.dry_run:
        shutil.rmtree(out)
    text, res["train_s"] = run(
        [
            CLI,
            "train",
            "speech-stream",
            "--preset",
            "cpu",
            "--data",
            str(train_root),
            "--out",
            str(out),
            "--set",
            f"optim.epochs={args.epochs}",
            "--set",
            f"train.threads={args.threads}",
            *sum((["--set", s] for s in args.set), []),
        ]
    )
    m = re.search(r"^final: .*?step=(\d+).*?elapsed_s=([\d.]+)", text, re.M)
    if m:
        res["steps"], res["train_elapsed_s"] = int(m[1]), float(m[2])
    m = re.search(r"\): (\d+) parameters", text)
    if m:
        res["parameters"] = int(m[1])
    m = re.search(r"^test \(best.pt\): loss=([\d.]+) acc=([\d.]+) bacc=([\d.]+)", text, re.M)
    if m:
        res["trainer_test"] = {"loss": float(m[1]), "acc": float(m[2]), "bacc": float(m[3])}
    onnx = out / "kws.onnx"
    _, res["export_s"] = run(
        [CLI, "export", str(out / "best.pt"), "--onnx", str(onnx), "--chunk", "160"]
    )
    _, res["val_stream_s"] = run(
        [
            CLI,
            "data",
            "kws-stream",
            str(out / "val.wav"),
            "--labels",
            str(out / "val.csv"),
            "--data",
            str(train_root),
            "--split",
            "validation",
            "--minutes",
            str(args.val_minutes),
            "--seed",
            "1",
        ]
    )
    text, res["tune_s"] = run(
        [
            CLI,
            "kws-tune",
            str(onnx),
            "--stream",
            str(out / "val.wav"),
            "--labels",
            str(out / "val.csv"),
            "--max-fa-per-hour",
            str(args.max_fa_per_hour),
        ]
    )
    m = re.search(
        r"threshold ([\d.]+), smoothing ([\d.]+) ms → detection rate ([\d.]+), "
        r"([\d.]+) false accepts/h",
        text,
    )
    if m:
        res["tuned"] = {
            "threshold": float(m[1]),
            "smooth_ms": float(m[2]),
            "val_detection_rate": float(m[3]),
            "val_fa_per_hour": float(m[4]),
        }
    return res


def evaluate(run: Runner, args, onnx: Path, test_root: Path, out: Path, tag: str) -> dict:
    """kws-stream (testing split of ``test_root``, seed 2) + kws-eval at the tuned setting."""
    wav, csv, js = out / f"{tag}.wav", out / f"{tag}.csv", out / f"{tag}.json"
    listed = {p.split("/")[0] for p in (test_root / "testing_list.txt").read_text().split()}
    present = [k for k in SC10 if k in listed]
    kw = [] if len(present) == len(SC10) else ["--keywords", ",".join(present)]
    _, t_stream = run(
        [
            CLI,
            "data",
            "kws-stream",
            str(wav),
            "--labels",
            str(csv),
            "--data",
            str(test_root),
            "--minutes",
            str(args.minutes),
            "--seed",
            "2",
            *kw,
        ]
    )
    _, t_eval = run(
        [CLI, "kws-eval", str(onnx), "--stream", str(wav), "--labels", str(csv), "--out", str(js)]
    )
    if args.dry_run:
        return {}
    r = json.loads(js.read_text())
    return {
        "stream": str(wav),
        "targets": r["targets"],
        "detected": r["detected"],
        "detection_rate": r["detection_rate"],
        "false_accepts": r["false_accepts"],
        "fa_per_hour": r["false_accepts_per_hour"],
        "latency_s": r["mean_latency_s"],
        "threshold": r["threshold"],
        "smooth_ms": r["smooth_ms"],
        "duration_s": r["duration_s"],
        "stream_s": t_stream,
        "eval_s": t_eval,
        "stream_keywords": present,
    }


def oracle(run: Runner, args, onnx: Path, wav: Path, csv: Path, grid: Path) -> dict:
    """The kws-tune grid on the TEST stream itself (--no-write): the best detection rate at
    <= each ORACLE_FA false accepts/h over all (threshold, smoothing). It separates "the
    scores do not separate the keywords" from "the threshold tuned on the other engines'
    validation stream does not transfer"."""
    run(
        [
            CLI,
            "kws-tune",
            str(onnx),
            "--stream",
            str(wav),
            "--labels",
            str(csv),
            "--max-fa-per-hour",
            str(ORACLE_FA[0]),
            "--no-write",
            "--out",
            str(grid),
        ]
    )
    if args.dry_run:
        return {}
    table = json.loads(grid.read_text())
    out = {}
    for fa in ORACLE_FA:
        ok = [r for r in table if r["false_accepts_per_hour"] <= fa]
        best = max(ok, key=lambda r: r["detection_rate"]) if ok else None
        out[f"det_at_{fa:g}_fa_h"] = best["detection_rate"] if best else 0.0
        out[f"thr_at_{fa:g}_fa_h"] = best["threshold"] if best else None
    return out


def add_oracles(run: Runner, args, res: dict, only: list[str] | None = None) -> None:
    """Oracle rates for every scored stream of ``res`` (in place); with ``only``, just the
    streams of those held-out engines (a merge: the others have theirs already)."""
    keep = (lambda e: True) if only is None else (lambda e: e in only)
    jobs = [
        (r["test"], Path(r["run"])) for e, r in res["loeo"].items() if r.get("test") and keep(e)
    ]
    ref = res.get("reference")
    if ref and ref.get("test"):
        if only is None:
            jobs.append((ref["test"], Path(ref["run"])))
        jobs += [(t, Path(ref["run"])) for e, t in ref.get("per_engine", {}).items() if keep(e)]
    for t, out in jobs:
        if "stream" not in t:  # --dry-run: nothing was scored
            continue
        wav = Path(t["stream"])
        t["oracle"] = oracle(
            run, args, out / "kws.onnx", wav, wav.with_suffix(".csv"), wav.with_suffix(".grid.json")
        )


# ---------------------------------------------------------------------------- report


def _f(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _oracle(t: dict) -> str:
    o = t.get("oracle") or {}
    return " / ".join(_f(o.get(f"det_at_{fa:g}_fa_h"), ".3f") for fa in ORACLE_FA)


def table(res: dict) -> str:
    lv = " / ".join(f"≤{fa:g}" for fa in ORACLE_FA)
    rows = [
        "| held-out engine | train engines | train clips (SC10 kw) | test stream: clips of | "
        "targets | detection rate | FA/h | latency (s) | thr / smooth | train time | "
        f"test-tuned det. at {lv} FA/h |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e, r in res["loeo"].items():
        t = r.get("test", {})
        rows.append(
            f"| **{e}** | {', '.join(r['train_engines'])} | {r['train_clips']} "
            f"({r['train_kw_clips']}) | {e} only, all splits ({r['test_clips']} clips, "
            f"{r['test_kw_clips']} kw) | {t.get('targets', '-')} | "
            f"{_f(t.get('detection_rate'), '.3f')} | {_f(t.get('fa_per_hour'), '.1f')} | "
            f"{_f(t.get('latency_s'), '.3f')} | {_f(t.get('threshold'), '.2f')} / "
            f"{_f(t.get('smooth_ms'), 'g')} ms | {_f(r.get('train_s'), '.0f')} s | "
            f"{_oracle(t)} |"
        )
    ref = res.get("reference")
    if ref:
        t = ref.get("test", {})
        rows.append(
            f"| none (in-domain ref.) | all 4 | {ref['train_clips']} ({ref['train_kw_clips']}) | "
            f"all engines, test split ({ref['test_clips']} clips) | {t.get('targets', '-')} | "
            f"{_f(t.get('detection_rate'), '.3f')} | {_f(t.get('fa_per_hour'), '.1f')} | "
            f"{_f(t.get('latency_s'), '.3f')} | {_f(t.get('threshold'), '.2f')} / "
            f"{_f(t.get('smooth_ms'), 'g')} ms | {_f(ref.get('train_s'), '.0f')} s | "
            f"{_oracle(t)} |"
        )
    out = "\n".join(rows)
    if ref and ref.get("per_engine"):
        out += (
            "\n\nSame engine, heard vs never heard (detection rate / FA/h; 'heard' = the "
            "in-domain reference on that engine's TEST-split speakers only, 'held out' = the "
            "LOEO model on all of that engine's clips):\n\n"
            "| engine | heard: det. | heard: FA/h | heard: targets (distinct test clips) | "
            f"held out: det. | held out: FA/h | Δ det. | heard: test-tuned {lv} | "
            f"held out: test-tuned {lv} |\n|---|---|---|---|---|---|---|---|---|"
        )
        for e, t in ref["per_engine"].items():
            h = res["loeo"].get(e, {}).get("test", {})
            d = (
                h["detection_rate"] - t["detection_rate"]
                if h.get("detection_rate") is not None and t.get("detection_rate") is not None
                else None
            )
            out += (
                f"\n| {e} | {_f(t.get('detection_rate'), '.3f')} | "
                f"{_f(t.get('fa_per_hour'), '.1f')} | {t.get('targets', '-')} "
                f"({t.get('distinct_kw_clips', '-')}) | {_f(h.get('detection_rate'), '.3f')} | "
                f"{_f(h.get('fa_per_hour'), '.1f')} | {_f(d, '+.3f')} | {_oracle(t)} | "
                f"{_oracle(h)} |"
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", type=Path, default=ROOT / "runs" / "ship" / "speech")
    ap.add_argument("--work", type=Path, default=ROOT / "bench" / "results" / "kws_engines")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "kws_engines.json")
    ap.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    ap.add_argument("--epochs", type=int, default=5, help="optim.epochs (cpu: 200 steps each)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], help="extra --set KEY=VALUE for train")
    ap.add_argument("--minutes", type=float, default=5.0, help="test stream length")
    ap.add_argument("--val-minutes", type=float, default=5.0, help="validation (tuning) stream")
    ap.add_argument("--max-fa-per-hour", type=float, default=5.0)
    ap.add_argument("--reference", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument(
        "--oracle",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also kws-tune each test stream itself (test-tuned rates)",
    )
    ap.add_argument(
        "--oracle-only",
        action="store_true",
        help="add the test-tuned rates to the --out JSON, rewrite it",
    )
    ap.add_argument(
        "--merge",
        action="store_true",
        help="add --engines to the earlier result in --out (same --src, budget "
        "and streams): its held-out rows are kept, and its reference run "
        "is scored on the new engines' streams instead of trained again",
    )
    ap.add_argument("--dry-run", action="store_true", help="build the roots, print commands")
    args = ap.parse_args()
    if args.oracle_only:
        res = json.loads(args.out.read_text())
        run = Runner(args.work / "commands.log", False)
        t0 = time.perf_counter()
        add_oracles(run, args, res)
        res["oracle_wall_s"] = time.perf_counter() - t0
        res["commands"] += run.commands
        args.out.write_text(json.dumps(res, indent=1) + "\n")
        md = report(res)
        args.out.with_suffix(".md").write_text(md)
        print("\n" + md)
        return

    t_all = time.perf_counter()
    args.work.mkdir(parents=True, exist_ok=True)
    src = args.src.resolve()
    by_engine = engine_splits(src)
    roots = build_roots(src, args.work, args.engines, by_engine)
    run = Runner(args.work / "commands.log", args.dry_run)
    res: dict = {
        "src": str(src),
        "stamp": {
            k: v
            for k, v in json.loads((src / STAMP_NAME).read_text()).items()
            if k not in ("words", "report")
        },
        "clips_by_engine_split": {
            e: {s: len(v) for s, v in d.items()} for e, d in by_engine.items()
        },
        "budget": {
            "preset": "cpu",
            "epochs": args.epochs,
            "steps": args.epochs * 200,
            "threads": args.threads,
            "extra_set": args.set,
            "nice": 10,
        },
        "protocol": (
            "train root = original train/val clips of the other engines (its testing_list = "
            "their original test clips, used only by the trainer's own end-of-run test); "
            "threshold tuned by kws-tune on a validation stream of the train root (other "
            "engines) at <= max_fa_per_hour; test stream = kws-stream over a root whose "
            "testing_list holds ALL clips (train+val+test) of the held-out engine, which "
            "the model never heard at all"
        ),
        "minutes": args.minutes,
        "val_minutes": args.val_minutes,
        "max_fa_per_hour": args.max_fa_per_hour,
        "loeo": {},
    }
    save = not args.dry_run
    earlier = None
    if args.merge:
        earlier = merge_base(args, res)
        res["loeo"] = dict(earlier["loeo"])
    for e in args.engines:
        r = roots[e]
        t0 = time.perf_counter()
        out = args.work / f"run-no-{e}"
        entry = {
            "train_root": str(args.work / "roots" / f"no-{e}"),
            "test_root": str(args.work / "roots" / f"only-{e}"),
            "train_engines": r["train"]["engines"],
            "train_clips": r["train"]["clips"]["train"],
            "train_kw_clips": r["train"]["sc10_keyword_clips"]["train"],
            "val_clips": r["train"]["clips"]["val"],
            "test_clips": r["test"]["clips"]["test"],
            "test_kw_clips": r["test"]["sc10_keyword_clips"]["test"],
        }
        print(
            f"\n## held out: {e}: train {entry['train_clips']} clips of "
            f"{', '.join(entry['train_engines'])}; "
            f"test {entry['test_clips']} {e} clips"
        )
        entry.update(train_export_tune(run, args, Path(entry["train_root"]), out))
        entry["test"] = evaluate(run, args, out / "kws.onnx", Path(entry["test_root"]), out, "test")
        entry["wall_s"] = time.perf_counter() - t0
        res["loeo"][e] = entry
        if save:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(res, indent=1) + "\n")
    if earlier is not None and earlier.get("reference"):
        t0 = time.perf_counter()  # the earlier reference run, scored on the new engines too
        ref = dict(earlier["reference"])
        score_per_engine(run, args, ref, roots)
        ref["merge_wall_s"] = time.perf_counter() - t0
        res["reference"] = ref
    elif args.reference:
        t0 = time.perf_counter()
        out = args.work / "run-all"
        ref = {
            "train_root": str(src),
            "train_clips": sum(len(d["train"]) for d in by_engine.values()),
            "train_kw_clips": sum(
                p.split("/")[0] in SC10 for d in by_engine.values() for p in d["train"]
            ),
            "test_clips": sum(len(d["test"]) for d in by_engine.values()),
        }
        print("\n## in-domain reference: all engines")
        ref.update(train_export_tune(run, args, src, out))
        ref["test"] = evaluate(run, args, out / "kws.onnx", src, out, "test")
        score_per_engine(run, args, ref, roots)
        ref["wall_s"] = time.perf_counter() - t0
        res["reference"] = ref
    if args.oracle:
        add_oracles(run, args, res, only=None if earlier is None else args.engines)
    res["total_wall_s"] = time.perf_counter() - t_all
    res["commands"] = run.commands
    if earlier is not None:  # the earlier commands first; wall times add up
        res["commands"] = earlier.get("commands", []) + run.commands
        res["total_wall_s"] += earlier.get("total_wall_s", 0.0)
    md = report(res, save)
    if save:
        args.out.write_text(json.dumps(res, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(md)
    print("\n" + md)


def score_per_engine(run: Runner, args, ref: dict, roots: dict) -> None:
    """The reference run ``ref`` scored on the in-domain test stream of each of
    ``args.engines`` (its ``per_engine`` rows, added to those it has; in place)."""
    out = Path(ref["run"])
    ref["per_engine"] = dict(ref.get("per_engine", {}))
    for e in args.engines:
        t = evaluate(
            run, args, out / "kws.onnx", args.work / "roots" / f"test-{e}", out, f"test-{e}"
        )
        t["distinct_kw_clips"] = roots[e]["indomain_test"]["sc10_keyword_clips"]["test"]
        ref["per_engine"][e] = t


def merge_base(args, res: dict) -> dict:
    """The earlier result in ``args.out`` that ``--merge`` adds to; SystemExit unless it was
    made from the same source set, budget and stream lengths (rows must be comparable)."""
    if not args.out.is_file():
        raise SystemExit(f"--merge: no earlier result at {args.out}")
    earlier = json.loads(args.out.read_text())
    for key in ("src", "budget", "minutes", "val_minutes", "max_fa_per_hour"):
        if earlier.get(key) != res[key]:
            raise SystemExit(
                f"--merge: {args.out} has {key} = {earlier.get(key)!r}, this run "
                f"{res[key]!r}; the rows would not be comparable"
            )
    return earlier


def report(res: dict, with_table: bool = True) -> str:
    b = res["budget"]
    md = "Commands (in order; `nice -n 10`, one at a time):\n\n```\n" + "\n".join(res["commands"])
    md += "\n```\n\n" + res["protocol"] + "\n\n"
    md += f"Budget: cpu preset, optim.epochs={b['epochs']} ({b['steps']} steps), "
    md += f"train.threads={b['threads']}; total wall {res['total_wall_s'] / 60:.1f} min.\n\n"
    return md + (table(res) + "\n" if with_table else "")


if __name__ == "__main__":
    main()
