"""Keyword-spotting robustness: the same labelled stream under gain, noise, reverberation,
telephone band-limiting and other input sample rates, each scored by the real kws-eval.

    python bench/kws_robustness.py MODEL.onnx --stream test.wav --labels test.csv
    python bench/kws_robustness.py MODEL.onnx --stream test.wav --labels test.csv \\
        --noise-root runs/ship/speech --out bench/results/kws_robustness.json

MODEL is an exported keyword spotter (e.g. liquid_stream/models/kws-sc10.onnx); the
stream and labels come from ``liquid-stream data kws-stream`` (held-out test split). Each
variant is written to a temporary folder as a **32-bit float WAV** (so +20 dB is not
clipped: the table gives its peak in dBFS, > 0 means an int16 WAV would have clipped) and
scored by ``liquid-stream kws-eval MODEL --stream V.wav --labels test.csv --out V.json``
(the click command itself, in this process), at the model's own tuned threshold and
smoothing window (ONNX metadata; no ``--threshold``). Labels are unchanged: no variant
moves words in time (the room impulse response has its direct path at lag 0, the
resampled files keep seconds, and kws-eval removes its resampler's delay).

Variants (all from the 16 kHz stream ``x``; fixed seeds, so reruns give the same audio):
  clean          x as is (the stream already carries kws-stream's light background noise)
  gain ±20 dB    ``apply_gain``
  SNR 20/10/5    x + g·n, with g set so that mean(x²) / mean((g·n)²) over the labelled
                 word spans equals the SNR; n is a crop sequence of the ``--noise-root``
                 ``_background_noise_/*.wav`` files, else pink noise (the table says which)
  reverb         ``reverberate(x, synth_rir(rng(0), rt60=0.5 s, drr=6 dB))``
  telephone      ``band_limit(x, 16000, 300, 3400)`` (causal Butterworth, HP order 2, LP 8)
  8/44.1/48 kHz  ``scipy.signal.resample_poly`` offline; kws-eval resamples back to 16 kHz
Ratios are each variant's detection rate over the clean one (same run, same model).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shlex
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
from scipy.io import wavfile
from scipy.signal import resample_poly

from liquid_stream.apps.common.audio import read_wav
from liquid_stream.apps.kws.cli import kws_eval_cmd
from liquid_stream.io.labels import read_label_csv
from liquid_stream.training.data.speech.augment import (
    apply_gain,
    band_limit,
    reverberate,
    synth_rir,
)

ROOT = Path(__file__).resolve().parents[1]

SR = 16000
RT60 = 0.5
DRR_DB = 6.0
SEED = 0


def pink_noise(rng: np.random.Generator, n: int) -> np.ndarray:
    """Unit-variance 1/f noise: white noise shaped by 1/sqrt(f) in the frequency domain."""
    spec = np.fft.rfft(rng.standard_normal(n))
    f = np.arange(len(spec), dtype=np.float64)
    f[0] = 1.0
    spec /= np.sqrt(f)
    spec[0] = 0.0
    y = np.fft.irfft(spec, n)
    return y / y.std()


def background_noise(root: Path | None, n: int, seed: int) -> tuple[np.ndarray, str]:
    """``n`` samples of noise at 16 kHz: random crops (≤ 10 s each) of the root's
    ``_background_noise_/*.wav`` files concatenated, else pink noise; and a description."""
    rng = np.random.default_rng(seed)
    files = sorted((root / "_background_noise_").glob("*.wav")) if root is not None else []
    if not files:
        return pink_noise(rng, n), "pink noise (no --noise-root)"
    recs = []
    for p in files:
        x, rate, _ = read_wav(p)
        if rate != SR:
            r = Fraction(SR, rate)
            x = resample_poly(x, r.numerator, r.denominator)
        recs.append(np.asarray(x, np.float64))
    out, pos = np.zeros(n), 0
    while pos < n:
        src = recs[rng.integers(len(recs))]
        take = min(n - pos, len(src), 10 * SR)
        start = rng.integers(0, len(src) - take + 1)
        out[pos : pos + take] = src[start : start + take]
        pos += take
    names = ", ".join(p.name for p in files)
    return out, f"crops of {root / '_background_noise_'} ({names})"


def span_mask(labels, n: int) -> np.ndarray:
    """True on the samples of every labelled word (keywords and other words)."""
    m = np.zeros(n, bool)
    for e in labels:
        m[int(e.start_s * SR) : int(math.ceil(e.end_s * SR))] = True
    return m


def add_noise_over_words(x: np.ndarray, noise: np.ndarray, snr_db: float, words) -> np.ndarray:
    """x + g·noise with the SNR measured over the labelled word spans ``words`` (a mask)."""
    ps, pn = float(np.mean(x[words] ** 2)), float(np.mean(noise[words] ** 2))
    return x + math.sqrt(ps / (pn * 10 ** (snr_db / 10))) * noise


def resample(x: np.ndarray, rate: int) -> np.ndarray:
    r = Fraction(rate, SR)
    return resample_poly(x, r.numerator, r.denominator)


def make_variants(x: np.ndarray, labels, noise: np.ndarray, noise_desc: str) -> list[dict]:
    """[{name, how, rate, audio}] in table order."""
    words = span_mask(labels, len(x))
    rir = synth_rir(np.random.default_rng(SEED), SR, rt60=RT60, drr_db=DRR_DB)
    v = [
        ("clean", "the test stream as is", SR, x),
        ("gain −20 dB", "apply_gain(x, −20)", SR, apply_gain(x, -20.0)),
        ("gain +20 dB", "apply_gain(x, +20), float WAV (not clipped)", SR, apply_gain(x, 20.0)),
    ]
    for snr in (20, 10, 5):
        v.append(
            (
                f"SNR {snr} dB",
                noise_desc if snr == 20 else "same noise",
                SR,
                add_noise_over_words(x, noise, snr, words),
            )
        )
    v += [
        (
            "reverb",
            f"synth_rir(rng({SEED}), RT60 {RT60} s, DRR {DRR_DB:g} dB)",
            SR,
            reverberate(x, rir),
        ),
        (
            "telephone",
            "band_limit 300–3400 Hz (HP order 2, LP order 8)",
            SR,
            band_limit(x, SR, 300.0, 3400.0),
        ),
    ]
    for rate in (8000, 44100, 48000):
        v.append(
            (
                f"{rate / 1000:g} kHz",
                "resample_poly offline; kws-eval resamples to 16 kHz",
                rate,
                resample(x, rate),
            )
        )
    return [
        {"name": n, "how": h, "rate": r, "audio": np.asarray(a, np.float32)} for n, h, r, a in v
    ]


def kws_eval(model: str, wav: Path, labels: str, out: Path, threads: int) -> dict:
    """``liquid-stream kws-eval MODEL --stream wav --labels labels --out out`` in-process."""
    args = [
        model,
        "--stream",
        str(wav),
        "--labels",
        labels,
        "--out",
        str(out),
        "--threads",
        str(threads),
    ]
    with contextlib.redirect_stdout(sys.stderr):  # its per-keyword table: progress only
        kws_eval_cmd.main(args, standalone_mode=False)
    return json.loads(out.read_text())


def fmt(v, spec: str) -> str:
    return "–" if v is None else format(v, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="exported keyword spotter (.onnx)")
    ap.add_argument("--stream", required=True, help="held-out 16 kHz test stream (WAV)")
    ap.add_argument("--labels", required=True, help="its labels CSV")
    ap.add_argument(
        "--noise-root",
        default=None,
        help="folder with _background_noise_/*.wav [default: pink noise]",
    )
    ap.add_argument("--threads", type=int, default=1, help="onnxruntime threads of kws-eval")
    ap.add_argument("--only", nargs="+", default=None, help="run only these variant names")
    ap.add_argument("--keep", default=None, help="write the variant WAVs here (kept)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "kws_robustness.json"))
    args = ap.parse_args()
    command = "python " + shlex.join(["bench/kws_robustness.py", *sys.argv[1:]])

    x, rate, _ = read_wav(args.stream)
    if rate != SR:
        raise SystemExit(f"{args.stream}: expected a {SR} Hz stream, got {rate} Hz")
    x = np.asarray(x, np.float64)
    labels = read_label_csv(args.labels)
    noise_root = Path(args.noise_root) if args.noise_root else None
    noise, noise_desc = background_noise(noise_root, len(x), SEED + 1)
    variants = make_variants(x, labels, noise, noise_desc)
    if args.only:
        variants = [v for v in variants if v["name"] in args.only or v["name"] == "clean"]

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="kws-robust-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, v in enumerate(variants):
        wav = work / f"v{i:02d}.wav"
        wavfile.write(wav, v["rate"], v["audio"])  # float32 → IEEE-float WAV
        peak = float(np.max(np.abs(v["audio"])))
        t = time.perf_counter()
        print(f"[{i + 1}/{len(variants)}] {v['name']}: {v['how']}", file=sys.stderr, flush=True)
        res = kws_eval(args.model, wav, args.labels, work / f"v{i:02d}.json", args.threads)
        rows.append(
            {
                "variant": v["name"],
                "how": v["how"],
                "rate": v["rate"],
                "wav": str(wav),
                "peak_dbfs": 20 * math.log10(max(peak, 1e-12)),
                "int16_clipped_fraction": float(np.mean(np.abs(v["audio"]) >= 1.0)),
                "detection_rate": res["detection_rate"],
                "detected": res["detected"],
                "targets": res["targets"],
                "false_accepts": res["false_accepts"],
                "false_accepts_per_hour": res["false_accepts_per_hour"],
                "mean_latency_s": res["mean_latency_s"],
                "rtf": res["rtf"],
                "threshold": res["threshold"],
                "smooth_ms": res["smooth_ms"],
                "duration_s": res["duration_s"],
                "eval_s": time.perf_counter() - t,
            }
        )

    clean = rows[0]["detection_rate"] or float("nan")
    print(f"\n`{command}`\n")
    print(
        f"model {args.model}; stream {args.stream} ({rows[0]['duration_s']:.0f} s, "
        f"{rows[0]['targets']} keywords); threshold {rows[0]['threshold']:g}, smoothing "
        f"{rows[0]['smooth_ms']:g} ms (the model's tuned values); one false accept = "
        f"{3600 / rows[0]['duration_s']:.0f}/h; WAVs are float32, so gains are not clipped "
        f"(peak dBFS > 0 would clip as int16)\n"
    )
    print(
        "| variant | how | peak dBFS | detection rate | / clean | FA/h (count) | mean latency s |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        dr = r["detection_rate"]
        ratio = "–" if dr is None else f"{dr / clean:.2f}"
        print(
            f"| {r['variant']} | {r['how']} | {r['peak_dbfs']:+.1f} | "
            f"{fmt(dr, '.3f')} ({r['detected']}/{r['targets']}) | {ratio} | "
            f"{r['false_accepts_per_hour']:.0f} ({r['false_accepts']}) | "
            f"{fmt(r['mean_latency_s'], '+.3f')} |"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "command": command,
                "model": args.model,
                "stream": args.stream,
                "labels": args.labels,
                "noise": noise_desc,
                "rows": rows,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"\nwrote {out} (variant WAVs and kws-eval outputs in {work})")


if __name__ == "__main__":
    main()
