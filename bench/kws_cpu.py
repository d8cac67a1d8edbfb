"""CPU cost of `liquid-stream kws` per audio hour, and whether its paths detect the same.

    python bench/kws_cpu.py                          # a 5-minute synthetic stream, this tree
    python bench/kws_cpu.py --ref e719df6            # and the kws of another commit (before)
    python bench/kws_cpu.py --wav talk.wav --paced   # your WAV, paced to real time

Runs the real command line, one process per row, ``OMP_NUM_THREADS=1``, on one WAV:

  default        liquid-stream kws MODEL --input W --fast --no-ui
  --chunk-ms 100 the same with 100 ms calls
  --live-calls   the same with a call every 10 ms, as for a microphone (the per-call path
                 of `kws` on a live input)

and, with ``--ref REV``, the default and ``--chunk-ms 100`` rows of the code of commit REV
(its liquid_stream, apps, export and training, extracted with ``git archive`` into a
temporary folder and run from there), e.g. the commit before a change: before and after
in one run, on one machine, under one load.

Each row runs ``--repeat`` times (round robin over the rows, so that a change of the
machine's load hits them alike); the table gives each row's least CPU time (the least
disturbed try; every try is in ``--out``). CPU time is the process's own, user + system,
all threads (``time.process_time()``): the child wraps the command's ``run_kws`` (source
→ worker thread → detections: everything after the model is loaded) and reports its CPU
time, so the cost per audio hour is that time / audio seconds × 3600. Start-up (imports,
reading and hashing the model) is not audio work; the whole process's CPU time
(``resource.getrusage(RUSAGE_CHILDREN)``) is printed beside it. The detections are the
printed lines ``HH:MM:SS.mmm  keyword  score`` (stream time, to the millisecond): "same"
compares their times and keywords with the first row's, and every try's with the row's
first (the sample-exact comparison is tests/test_kws_cpu_path.py).

Without ``--wav`` the stream is generated (and kept with ``--keep PATH``): SC10 keywords
and a few other words rendered with the synthetic-speech generator's espeak-ng voices
(:func:`liquid_stream.training.data.speech_synth.render_clip`, 1 s clips, −70 dB floor),
laid end to end with 0.2–1.0 s gaps of low noise, 16 kHz mono int16
(:func:`keyword_stream`, also used by the test). Needs ``espeak-ng``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import resource
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "liquid_stream" / "models" / "kws-sc10.onnx"
OTHER_WORDS = ("marvin", "house", "bird", "wow", "happy", "tree")  # non-keywords
DET_LINE = re.compile(r"^(\d\d):(\d\d):(\d\d)\.(\d{3})  (\S+)  ([0-9.]+)$")
ROWS = [  # (label, extra kws arguments); the first row is the reference of "same"
    ("default", []),
    ("--chunk-ms 100", ["--chunk-ms", "100"]),
    ("--live-calls", ["--live-calls"]),
]
REF_ROWS = [("default", []), ("--chunk-ms 100", ["--chunk-ms", "100"])]
LIVE_ROWS = [  # (label, KwsWorker hold)
    ("10 ms blocks, held back while no detection can come (kws on a microphone)", True),
    ("10 ms blocks, one call each (hold=False: the cost when a score is always near its "
     "threshold)", False),
]  # fmt: skip


# ------------------------------------------------------------------------------ stream


def keyword_stream(path: str | os.PathLike, seconds: float = 300.0, seed: int = 0,
                   keyword_share: float = 0.75) -> dict:  # fmt: skip
    """Write a 16 kHz int16 WAV of ~``seconds`` of spoken words (SC10 keywords with share
    ``keyword_share``, else one of :data:`OTHER_WORDS`) by 12 espeak-ng speakers, 1 s clips
    with 0.2–1.0 s noise gaps; returns ``{"path", "seconds", "words", "keywords"}``."""
    from liquid_stream.training.data.speech import SC10_WORDS, SR
    from liquid_stream.training.data.speech_synth import ClipJob, make_speakers, render_clip
    from liquid_stream.wav import write_pcm16

    rng = np.random.default_rng(seed)
    speakers = make_speakers(12, seed, engines=("espeak-ng",))
    parts: list[np.ndarray] = []
    n = words = keywords = 0
    while n < seconds * SR:
        is_kw = rng.random() < keyword_share
        word = str(rng.choice(SC10_WORDS if is_kw else OTHER_WORDS))
        job = ClipJob(
            relpath=f"{words}.wav", word=word, voice=speakers[int(rng.integers(len(speakers)))],
            speed_jitter=float(rng.uniform(0.9, 1.1)), pitch_jitter=float(rng.uniform(-4, 4)),
            peak=float(rng.uniform(0.2, 0.8)), offset=float(rng.uniform(0.2, 0.8)),
            floor_db=-70.0, noise_seed=int(rng.integers(1 << 31)),
        )  # fmt: skip
        clip, _ = render_clip(job)
        gap = np.round(rng.normal(0, 30, int(rng.uniform(0.2, 1.0) * SR))).astype(np.int16)
        parts += [clip, gap]
        n += len(clip) + len(gap)
        words += 1
        keywords += is_kw
    write_pcm16(path, np.concatenate(parts), SR)
    return {"path": str(path), "seconds": n / SR, "words": words, "keywords": keywords}


# --------------------------------------------------------------------------------- code


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


def extract_rev(rev: str, into: Path) -> Path:
    """The package of commit ``rev`` laid out as installed (``liquid_stream`` with its
    ``apps``, ``export`` and ``training`` inside) under ``into``; returns the folder to put
    on PYTHONPATH."""
    src = into / "src"
    src.mkdir(parents=True)
    tar = into / "rev.tar"
    with open(tar, "wb") as f:
        subprocess.run(["git", "archive", rev, "liquid_stream", "apps", "export", "training"],
                       cwd=ROOT, stdout=f, check=True)  # fmt: skip
    with tarfile.open(tar) as t:
        t.extractall(src, filter="data")
    pkg = into / "pkg"
    pkg.mkdir()
    (src / "liquid_stream").rename(pkg / "liquid_stream")
    for sub in ("apps", "export", "training"):
        (src / sub).rename(pkg / "liquid_stream" / sub)
    return pkg


# ---------------------------------------------------------------------------------- run


# the child: `liquid-stream` with its run_kws timed (process CPU, all threads), and the
# file of the kws code it runs (this tree or an extracted commit)
CHILD = """
import sys, time
import liquid_stream.apps.kws_cli as m
sys.stderr.write("bench code: " + m.__file__ + chr(10))
run = m.run_kws
def timed(*a, **k):
    c = time.process_time()
    try:
        return run(*a, **k)
    finally:
        sys.stderr.write("bench run_kws cpu: %r" % (time.process_time() - c) + chr(10))
m.run_kws = timed
from liquid_stream.cli import main
main()
"""


def child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_kws(wav: Path, extra: list[str], model: Path, fast: bool, pythonpath: Path | None,
            cwd: Path) -> dict:  # fmt: skip
    """One `liquid-stream kws` process on ``wav``: CPU s, wall s, detections."""
    args = ["kws", str(model), "--input", str(wav), "--no-ui", *(["--fast"] * fast), *extra]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    cmd = [sys.executable, "-c", CHILD, *args]
    cpu0, t0 = child_cpu(), time.perf_counter()
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    cpu, wall = child_cpu() - cpu0, time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"kws failed ({' '.join(args)}):\n{res.stdout}\n{res.stderr}")
    dets = []
    for line in res.stdout.splitlines():
        m = DET_LINE.match(line)
        if m:
            h, mi, s, ms, word, score = m.groups()
            t_ms = ((int(h) * 60 + int(mi)) * 60 + int(s)) * 1000 + int(ms)
            dets.append((t_ms, word, float(score)))
    said = dict(ln.split(": ", 1) for ln in res.stderr.splitlines() if ln.startswith("bench "))
    return {"process_cpu_s": cpu, "wall_s": wall, "detections": dets,
            "run_cpu_s": float(said["bench run_kws cpu"]), "code_path": said["bench code"],
            "summary": res.stdout.strip().splitlines()[-1],
            "argv": ["liquid-stream", *args]}  # fmt: skip


class _LiveSource:
    """The WAV as a live input gives it: ``block``-sample blocks (kind "mic": the worker's
    live path, as for :class:`~liquid_stream.apps.audio.MicSource`), without waiting."""

    kind, dropped, overflows, name = "mic", 0, 0, "live"

    def __init__(self, x: np.ndarray, rate: int, block: int):
        self.x, self.rate, self.block = x, rate, block

    def blocks(self, drain: bool = False):
        for pos in range(0, len(self.x), self.block):
            yield self.x[pos : pos + self.block]

    def stop(self) -> None:
        pass


def run_live(wav: Path, model: Path, hold: bool) -> dict:
    """The live (microphone) path of `kws` in this process: 10 ms blocks through
    :class:`~liquid_stream.apps.kws_cli.KwsWorker` (run in this thread), the worker's CPU
    time, its detections (sample, keyword) and whether each came from a call of its own
    block alone (on the block's arrival: the latency of one call a block)."""
    from liquid_stream.apps.kws import KeywordSpotter
    from liquid_stream.apps.kws_cli import KwsWorker
    from liquid_stream.wav import read_wav

    x, rate, _ = read_wav(wav)
    spotter = KeywordSpotter(model, chunk_ms=10.0, threads=1)
    if rate != spotter.sample_rate:
        raise SystemExit(f"{wav}: {rate} Hz; the live rows need the model's rate")
    calls: list[tuple[int, int, list]] = []
    detect = spotter.detect

    def logged(block):
        n0 = spotter.tracker._n
        dets = detect(block)
        calls.append((n0, len(block), dets))
        return dets

    spotter.detect = logged
    worker = KwsWorker(spotter, _LiveSource(x, rate, spotter.chunk), hold=hold)
    c = time.process_time()
    worker.run()
    cpu = time.process_time() - c
    if worker.error is not None:
        raise SystemExit(f"live path failed: {worker.error}")
    dets = [(round(d.time_s * rate), d.keyword, d.score) for _, _, ds in calls for d in ds]
    alone = all(n == spotter.chunk for _, n, ds in calls if ds)
    return {"run_cpu_s": cpu, "calls": len(calls), "detections": dets, "alone": alone}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wav", type=Path, default=None, help="The stream (default: generated).")
    ap.add_argument("--keep", type=Path, default=None, help="Write the generated stream here.")
    ap.add_argument("--minutes", type=float, default=5.0, help="Length of a generated stream.")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument("--ref", action="append", default=[], metavar="REV",
                    help="Also run the kws of this commit (repeatable).")  # fmt: skip
    ap.add_argument("--paced", action="store_true",
                    help="Real time (kws's default for --input) instead of --fast; each row "
                         "then takes the stream's duration.")  # fmt: skip
    ap.add_argument("--repeat", type=int, default=3,
                    help="Runs of each row (round robin); the table: the least CPU.")  # fmt: skip
    ap.add_argument("--out", type=Path, default=None, help="Write the rows as JSON here.")
    a = ap.parse_args(argv)

    commit = git("rev-parse", "--short", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    with tempfile.TemporaryDirectory(prefix="kws-cpu-") as tmp:
        tmp = Path(tmp)
        if a.wav is not None and a.wav.is_file():
            wav, info = a.wav, {"path": str(a.wav)}
        else:
            wav = a.keep or a.wav or tmp / "stream.wav"
            print(f"generating a {a.minutes:g}-minute keyword stream → {wav}", file=sys.stderr)
            info = keyword_stream(wav, 60 * a.minutes, a.seed)
        from liquid_stream.wav import read_wav

        x, rate, _ = read_wav(wav)
        audio_s = len(x) / rate
        del x
        runs = [(f"this tree ({commit}{'+' if dirty else ''})", None, ROWS)]
        for rev in a.ref:
            full = git("rev-parse", "--short", rev)
            runs.append((f"{rev} ({full})", extract_rev(rev, tmp / f"rev-{full}"), REF_ROWS))
        rows = []
        jobs = [(code, pkg, label, extra) for code, pkg, configs in runs
                for label, extra in configs]  # fmt: skip
        tries: list[list[dict]] = [[] for _ in jobs]
        for i in range(a.repeat):  # round robin: a change of load hits every row alike
            for j, (code, pkg, label, extra) in enumerate(jobs):
                print(f"  [{i + 1}/{a.repeat}] {code}: {label} …", file=sys.stderr, flush=True)
                cwd = tmp if pkg is not None else ROOT
                tries[j].append(run_kws(wav, extra, a.model, not a.paced, pkg, cwd))
        rows = []
        for (code, _, label, _), got in zip(jobs, tries, strict=True):
            best = min(got, key=lambda r: r["run_cpu_s"])  # the least disturbed try
            per_h = [r["run_cpu_s"] / audio_s * 3600 for r in got]
            stable = all(r["detections"] == got[0]["detections"] for r in got)
            rows.append(dict(best, code=code, label=label, cpu_per_audio_h=min(per_h),
                             cpu_per_audio_h_tries=per_h, stable=stable))  # fmt: skip
        print("  in process: the live path …", file=sys.stderr, flush=True)
        live = []
        for label, hold in LIVE_ROWS:
            got = [run_live(wav, a.model, hold) for _ in range(a.repeat)]
            best = min(got, key=lambda r: r["run_cpu_s"])
            stable = all(r["detections"] == got[0]["detections"] for r in got)
            live.append(dict(best, label=label, stable=stable,
                             cpu_per_audio_h=best["run_cpu_s"] / audio_s * 3600))  # fmt: skip
    ref = rows[0]["detections"]
    ref_key = [(t, w) for t, w, _ in ref]
    for r in rows:
        key = [(t, w) for t, w, _ in r["detections"]]
        r["same"] = key == ref_key and r["stable"]
        r["max_score_diff"] = (
            max((abs(s - s0) for (_, _, s), (_, _, s0) in zip(r["detections"], ref, strict=True)),
                default=0.0)
            if r["same"] else None
        )  # fmt: skip

    print(f"\n# kws CPU per audio hour — {datetime.datetime.now():%Y-%m-%d %H:%M}, commit "
          f"{commit}{' (+ uncommitted changes)' if dirty else ''}")  # fmt: skip
    print(f"command: python {' '.join(shlex.quote(s) for s in [sys.argv[0], *sys.argv[1:]])}")
    import onnxruntime

    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; "
          f"python {platform.python_version()}, onnxruntime {onnxruntime.__version__}; "
          f"OMP_NUM_THREADS=1, --threads 1 (kws default)")  # fmt: skip
    words = f", {info['words']} words, {info['keywords']} keywords" if "words" in info else ""
    print(f"stream: {wav} ({audio_s:.1f} s at {rate} Hz{words}); model {a.model}; "
          f"{'paced (real time)' if a.paced else '--fast'}")  # fmt: skip
    print(f"command line of each row: liquid-stream kws {a.model.name} --input "
          f"{Path(wav).name} --no-ui{'' if a.paced else ' --fast'} [ROW]\n")  # fmt: skip
    print(
        "| code | row | CPU s streaming | CPU s process | CPU-s / audio h | "
        "detections | same as row 1 (ms, keyword) | max Δscore |"
    )
    print("|---|---|---:|---:|---:|---:|---|---:|")
    for r in rows:
        diff = "-" if r["max_score_diff"] is None else f"{r['max_score_diff']:.3f}"
        print(f"| {r['code']} | {r['label']} | {r['run_cpu_s']:.2f} | {r['process_cpu_s']:.2f} | "
              f"**{r['cpu_per_audio_h']:.0f}** | {len(r['detections'])} | "
              f"{'yes' if r['same'] else 'NO'} | {diff} |")  # fmt: skip
    print(
        "\nThe live path (a microphone's 10 ms blocks, `kws` without --input), in this "
        "process (KwsWorker on the WAV's blocks, no waiting; the worker's CPU time):\n"
    )
    print("| row | calls | CPU-s / audio h | detections | same samples as row 1 of this "
          "table | each detection from a call of its own block |")  # fmt: skip
    print("|---|---:|---:|---:|---|---|")
    ref_ms = [(t, w) for t, w, _ in ref]
    for r in live:
        same = [(t, w) for t, w, _ in r["detections"]] == [
            (t, w) for t, w, _ in live[0]["detections"]
        ] and r["stable"]
        # and against the command's rows, to the millisecond (the command prints ms)
        ms = [(int(round(t / rate * 1000)), w) for t, w, _ in r["detections"]]  # as kws prints
        r["same"], r["same_ms_as_row1"] = same, ms == ref_ms
        yes = {True: "yes", False: "NO"}
        print(f"| {r['label']} | {r['calls']} | **{r['cpu_per_audio_h']:.0f}** | "
              f"{len(r['detections'])} | {yes[same]} (ms as the command's row 1: "
              f"{yes[ms == ref_ms]}) | {yes[r['alone']]} |")  # fmt: skip
    if a.out:
        keep = (
            "code",
            "label",
            "argv",
            "code_path",
            "run_cpu_s",
            "process_cpu_s",
            "cpu_per_audio_h",
            "wall_s",
            "same",
            "max_score_diff",
            "summary",
            "detections",
        )
        a.out.write_text(json.dumps({
            "date": datetime.datetime.now().isoformat(timespec="seconds"), "commit": commit,
            "dirty": dirty, "stream": str(wav), "audio_s": audio_s,
            "paced": a.paced, "rows": [{k: r[k] for k in keep} for r in rows],
            "live_rows": live,
        }, indent=1) + "\n")  # fmt: skip
    return 0 if all(r["same"] for r in rows + live) and all(r["alone"] for r in live) else 1


if __name__ == "__main__":
    sys.exit(main())
