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
first.

A second table runs the same paths in this process, sample by sample (the worker of
`kws`, :class:`~liquid_stream.apps.kws.cli.KwsWorker`, in this thread on the WAV's blocks,
no waiting; its CPU time): a live input's 10 ms blocks one call each (the old default),
100 ms calls, the file's calls of the model's export chunk (the default for ``--input``)
and a live input's blocks held back while none can fire (a microphone). Their detections
are compared to the first's at the sample: the graph is exact for any chunking only to
float32 rounding (10 ms and 100 ms calls of the shipped graph differ by ~1e-6 of the
logits), so a crossing whose smoothed score lands within that of the threshold can move by
a sample; such moves are counted and checked to be such ties. For the held-back path the
table says whether every detection came from a call of its own block alone, i.e. on the
arrival of its block as with one call a block (its latency).

Without ``--wav`` the stream is generated (and kept with ``--keep PATH``): SC10 keywords
and a few other words rendered with the synthetic-speech generator's espeak-ng voices
(:func:`liquid_stream.training.data.speech.speech_synth.render_clip`, 1 s clips, −70 dB floor),
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
INPROC_ROWS = [  # (label, path of run_inproc); the first is the reference of "vs row 1"
    ("live 10 ms blocks, one call each (the old default; hold=False)", "10 ms"),
    ("file, 100 ms calls (--chunk-ms 100)", "100 ms"),
    ("file, calls of the export chunk (kws --input, the default)", "batch"),
    ("live 10 ms blocks, held back while none can fire (kws on a microphone)", "held"),
]


# ------------------------------------------------------------------------------ stream


def keyword_stream(
    path: str | os.PathLike, seconds: float = 300.0, seed: int = 0, keyword_share: float = 0.75
) -> dict:
    """Write a 16 kHz int16 WAV of ~``seconds`` of spoken words (SC10 keywords with share
    ``keyword_share``, else one of :data:`OTHER_WORDS`) by 12 espeak-ng speakers, 1 s clips
    with 0.2–1.0 s noise gaps; returns ``{"path", "seconds", "words", "keywords"}``."""
    from liquid_stream.io.wav import write_pcm16
    from liquid_stream.training.data.speech.speech import SC10_WORDS, SR
    from liquid_stream.training.data.speech.speech_synth import ClipJob, make_speakers, render_clip

    rng = np.random.default_rng(seed)
    speakers = make_speakers(12, seed, engines=("espeak-ng",))
    parts: list[np.ndarray] = []
    n = words = keywords = 0
    while n < seconds * SR:
        is_kw = rng.random() < keyword_share
        word = str(rng.choice(SC10_WORDS if is_kw else OTHER_WORDS))
        job = ClipJob(
            relpath=f"{words}.wav",
            word=word,
            voice=speakers[int(rng.integers(len(speakers)))],
            speed_jitter=float(rng.uniform(0.9, 1.1)),
            pitch_jitter=float(rng.uniform(-4, 4)),
            peak=float(rng.uniform(0.2, 0.8)),
            offset=float(rng.uniform(0.2, 0.8)),
            floor_db=-70.0,
            noise_seed=int(rng.integers(1 << 31)),
        )
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
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def extract_rev(rev: str, into: Path) -> Path:
    """The package of commit ``rev`` laid out as installed (``liquid_stream`` with its
    ``apps``, ``export`` and ``training`` inside) under ``into``; returns the folder to put
    on PYTHONPATH."""
    src = into / "src"
    src.mkdir(parents=True)
    tar = into / "rev.tar"
    with open(tar, "wb") as f:
        subprocess.run(
            ["git", "archive", rev, "liquid_stream", "apps", "export", "training"],
            cwd=ROOT,
            stdout=f,
            check=True,
        )
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
import liquid_stream.apps.kws.cli as m
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


def run_kws(
    wav: Path, extra: list[str], model: Path, fast: bool, pythonpath: Path | None, cwd: Path
) -> dict:
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
    return {
        "process_cpu_s": cpu,
        "wall_s": wall,
        "detections": dets,
        "run_cpu_s": float(said["bench run_kws cpu"]),
        "code_path": said["bench code"],
        "summary": res.stdout.strip().splitlines()[-1],
        "argv": ["liquid-stream", *args],
    }


class _LiveSource:
    """The WAV as a live input gives it: ``block``-sample blocks (kind "mic": the worker's
    live path, as for :class:`~liquid_stream.apps.common.audio.MicSource`), without waiting."""

    kind, dropped, overflows, name = "mic", 0, 0, "live"

    def __init__(self, x: np.ndarray, rate: int, block: int):
        self.x, self.rate, self.block = x, rate, block

    def blocks(self, drain: bool = False):
        for pos in range(0, len(self.x), self.block):
            yield self.x[pos : pos + self.block]

    def stop(self) -> None:
        pass


def run_inproc(wav: Path, model: Path, path: str) -> dict:
    """One of :data:`INPROC_ROWS`' paths of `kws` in this process: the WAV through
    :class:`~liquid_stream.apps.kws.cli.KwsWorker` (run in this thread), the worker's CPU
    time, its detections ``(sample, keyword, score)``, its calls, and whether each
    detection came from a call of its own block alone (on the block's arrival: the latency
    of one call a block)."""
    from liquid_stream.apps.common.audio import WavSource
    from liquid_stream.apps.kws.cli import KwsWorker
    from liquid_stream.apps.kws.spotter import KeywordSpotter
    from liquid_stream.io.wav import read_wav

    chunk_ms = 100.0 if path == "100 ms" else 10.0
    spotter = KeywordSpotter(model, chunk_ms=chunk_ms, threads=1)
    if path in ("10 ms", "held"):  # a live input's blocks
        x, rate, _ = read_wav(wav)
        source = _LiveSource(x, rate, spotter.chunk)
        worker = KwsWorker(spotter, source, hold=path == "held")
    else:  # a file
        source = WavSource(wav, 100.0, realtime=False)
        rate = source.rate
        worker = KwsWorker(
            spotter, source, batch=spotter.batch if path == "batch" else None, hold=False
        )
    if rate != spotter.sample_rate:
        raise SystemExit(f"{wav}: {rate} Hz; the rows in process need the model's rate")
    calls: list[tuple[int, int, list]] = []
    detect = spotter.detect

    def logged(block):
        n0 = spotter.tracker._n
        dets = detect(block)
        calls.append((n0, len(block), dets))
        return dets

    spotter.detect = logged
    c = time.process_time()
    worker.run()
    cpu = time.process_time() - c
    if worker.error is not None:
        raise SystemExit(f"{path}: {worker.error}")
    dets = [(round(d.time_s * rate), d.keyword, d.score) for _, _, ds in calls for d in ds]
    alone = all(n <= spotter.chunk for _, n, ds in calls if ds) if path == "held" else None
    return {
        "run_cpu_s": cpu,
        "calls": len(calls),
        "detections": dets,
        "alone": alone,
        "threshold": float(spotter.thresholds.min()),
    }


def compare(dets: list, ref: list, threshold: float) -> str:
    """How ``dets`` ``(sample, keyword, score)`` differ from ``ref``: "identical", else the
    count of detections at another sample (and by how much), and whether each is a float
    tie: the score at the crossing within 1e-6 of the threshold on one of the two paths
    (the graphs are exact for any chunking only to float32 rounding, ~1e-6 of the logits,
    so such a crossing can move by a sample)."""
    if [(t, w) for t, w, _ in dets] == [(t, w) for t, w, _ in ref]:
        return "identical"
    if [w for _, w, _ in dets] != [w for _, w, _ in ref]:
        return "OTHER DETECTIONS"
    moved = [(t, t0, s, s0) for (t, _, s), (t0, _, s0) in zip(dets, ref, strict=True) if t != t0]
    shift = max(abs(t - t0) for t, t0, _, _ in moved)
    ties = all(min(abs(s - threshold), abs(s0 - threshold)) < 1e-6 for _, _, s, s0 in moved)
    return (
        f"{len(moved)} of {len(ref)} at a sample ≤ {shift} away"
        f"{', each a float tie at the threshold' if ties else ', NOT ALL TIES'}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wav", type=Path, default=None, help="The stream (default: generated).")
    ap.add_argument("--keep", type=Path, default=None, help="Write the generated stream here.")
    ap.add_argument("--minutes", type=float, default=5.0, help="Length of a generated stream.")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument(
        "--ref",
        action="append",
        default=[],
        metavar="REV",
        help="Also run the kws of this commit (repeatable).",
    )
    ap.add_argument(
        "--paced",
        action="store_true",
        help="Real time (kws's default for --input) instead of --fast; each row "
        "then takes the stream's duration.",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="Runs of each row (round robin); the table: the least CPU.",
    )
    ap.add_argument("--out", type=Path, default=None, help="Write the rows as JSON here.")
    a = ap.parse_args(argv)

    commit = git("rev-parse", "--short", "HEAD")
    code_dirs = ("liquid_stream", "apps", "export", "training", "bench")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no", "--", *code_dirs))
    with tempfile.TemporaryDirectory(prefix="kws-cpu-") as tmp:
        tmp = Path(tmp)
        if a.wav is not None and a.wav.is_file():
            wav, info = a.wav, {"path": str(a.wav)}
        else:
            wav = a.keep or a.wav or tmp / "stream.wav"
            print(f"generating a {a.minutes:g}-minute keyword stream → {wav}", file=sys.stderr)
            info = keyword_stream(wav, 60 * a.minutes, a.seed)
        from liquid_stream.io.wav import read_wav

        x, rate, _ = read_wav(wav)
        audio_s = len(x) / rate
        del x
        runs = [(f"this tree ({commit}{'+' if dirty else ''})", None, ROWS)]
        for rev in a.ref:
            full = git("rev-parse", "--short", rev)
            runs.append((f"{rev} ({full})", extract_rev(rev, tmp / f"rev-{full}"), REF_ROWS))
        rows = []
        jobs = [
            (code, pkg, label, extra) for code, pkg, configs in runs for label, extra in configs
        ]
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
            rows.append(
                dict(
                    best,
                    code=code,
                    label=label,
                    cpu_per_audio_h=min(per_h),
                    cpu_per_audio_h_tries=per_h,
                    stable=stable,
                )
            )
        print("  in process: the paths sample by sample …", file=sys.stderr, flush=True)
        inproc = []
        for label, path in INPROC_ROWS:
            got = [run_inproc(wav, a.model, path) for _ in range(a.repeat)]
            best = min(got, key=lambda r: r["run_cpu_s"])
            stable = all(r["detections"] == got[0]["detections"] for r in got)
            inproc.append(
                dict(
                    best,
                    label=label,
                    stable=stable,
                    cpu_per_audio_h=best["run_cpu_s"] / audio_s * 3600,
                )
            )
    ref = rows[0]["detections"]
    ref_key = [(t, w) for t, w, _ in ref]
    for r in rows:
        key = [(t, w) for t, w, _ in r["detections"]]
        r["same"] = key == ref_key and r["stable"]
        r["max_score_diff"] = (
            max(
                (abs(s - s0) for (_, _, s), (_, _, s0) in zip(r["detections"], ref, strict=True)),
                default=0.0,
            )
            if r["same"]
            else None
        )

    print(
        f"\n# kws CPU per audio hour — {datetime.datetime.now():%Y-%m-%d %H:%M}, commit "
        f"{commit}{' (+ uncommitted changes to the code)' if dirty else ''}"
    )
    print(f"command: python {' '.join(shlex.quote(s) for s in [sys.argv[0], *sys.argv[1:]])}")
    import onnxruntime

    print(
        f"machine: {platform.node()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; "
        f"python {platform.python_version()}, onnxruntime {onnxruntime.__version__}; "
        f"OMP_NUM_THREADS=1, --threads 1 (kws default)"
    )
    words = f", {info['words']} words, {info['keywords']} keywords" if "words" in info else ""
    print(
        f"stream: {wav} ({audio_s:.1f} s at {rate} Hz{words}); model {a.model}; "
        f"{'paced (real time)' if a.paced else '--fast'}"
    )
    print(
        f"command line of each row: liquid-stream kws {a.model.name} --input "
        f"{Path(wav).name} --no-ui{'' if a.paced else ' --fast'} [ROW]\n"
    )
    print(
        "| code | row | CPU s streaming | CPU s process | CPU-s / audio h | "
        "detections | same as row 1 (ms, keyword) | max Δscore |"
    )
    print("|---|---|---:|---:|---:|---:|---|---:|")
    for r in rows:
        diff = "-" if r["max_score_diff"] is None else f"{r['max_score_diff']:.3f}"
        print(
            f"| {r['code']} | {r['label']} | {r['run_cpu_s']:.2f} | {r['process_cpu_s']:.2f} | "
            f"**{r['cpu_per_audio_h']:.0f}** | {len(r['detections'])} | "
            f"{'yes' if r['same'] else 'NO'} | {diff} |"
        )
    print(
        "\nThe same paths in this process, sample by sample (KwsWorker run in this "
        "thread, no waiting; the worker's CPU time):\n"
    )
    print(
        "| path | calls | CPU-s / audio h | detections | vs row 1 (sample, keyword) | "
        "vs the command's row 1 (ms) | detections from a call of their own block |"
    )
    print("|---|---:|---:|---:|---|---|---|")
    ref_ms = [(t, w) for t, w, _ in ref]
    yes = {True: "yes", False: "NO"}
    for r in inproc:
        r["vs_row1"] = compare(r["detections"], inproc[0]["detections"], r["threshold"])
        if not r["stable"]:
            r["vs_row1"] += " (NOT STABLE over the tries)"
        ms = [(int(round(t / rate * 1000)), w) for t, w, _ in r["detections"]]  # as kws prints
        r["same_ms_as_command"] = ms == ref_ms
        print(
            f"| {r['label']} | {r['calls']} | **{r['cpu_per_audio_h']:.0f}** | "
            f"{len(r['detections'])} | {r['vs_row1']} | {yes[ms == ref_ms]} | "
            f"{'-' if r['alone'] is None else yes[r['alone']]} |"
        )
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
        a.out.write_text(
            json.dumps(
                {
                    "date": datetime.datetime.now().isoformat(timespec="seconds"),
                    "commit": commit,
                    "dirty": dirty,
                    "stream": str(wav),
                    "audio_s": audio_s,
                    "paced": a.paced,
                    "rows": [{k: r[k] for k in keep} for r in rows],
                    "inproc_rows": inproc,
                },
                indent=1,
            )
            + "\n"
        )
    ok = all(r["same"] for r in rows) and all(r["same_ms_as_command"] for r in inproc)
    ok = ok and all("NO" not in r["vs_row1"] and "OTHER" not in r["vs_row1"] for r in inproc)
    return 0 if ok and all(r["alone"] is not False for r in inproc) else 1


if __name__ == "__main__":
    sys.exit(main())
