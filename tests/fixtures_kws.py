"""Fixtures of the keyword-spotting tests: a real (small) trained tone spotter and tone WAVs.

``train_tone_spotter(path)`` trains the toy task's model (training/tasks.py ``toy``:
8 kHz noise with 440 / 880 Hz bursts, per-sample labels silence / 440 Hz / 880 Hz,
causal window decoder) for a few seconds of CPU and exports it to ONNX with the
metadata of a keyword spotter; the tones play the keywords. It trains once per test run
(per ``steps`` and ``seed``): later calls copy that graph to their path, so the eight
modules that use it cost one training, not eight. ``tone_stream(rate)``
writes a WAV with tone "keywords" at known times.
"""

from __future__ import annotations

import atexit
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path

import numpy as np

from liquid_stream.apps.common.audio import write_wav

SR = 8000
LABELS = ["silence", "440 Hz", "880 Hz"]
SCALE = 0.5  # training signals are tone_bursts(...) * SCALE: noise std 0.15, tones <= 0.5
# (start_s, duration_s, label) of the tone "keywords" in the test stream
EVENTS = [
    (1.5, 0.4, "440 Hz"),
    (3.0, 0.5, "880 Hz"),
    (4.6, 0.3, "440 Hz"),
    (6.2, 0.6, "440 Hz"),
    (8.0, 0.4, "880 Hz"),
]
STREAM_S = 9.5


_TRAINED: dict[tuple[int, int], dict] = {}  # (steps, seed) -> info of the first training


def train_tone_spotter(out: str | Path, steps: int = 160, seed: int = 0) -> dict:
    """The toy tone model (fixed seeds) exported to ``out``; returns info incl. accuracy.
    Trained on the first call of the test run, copied from that graph on later ones."""
    if (steps, seed) not in _TRAINED:
        cache = Path(tempfile.mkdtemp(prefix="tone-spotter-"))
        atexit.register(shutil.rmtree, cache, ignore_errors=True)
        _TRAINED[steps, seed] = _train_tone_spotter(cache / "tone.onnx", steps, seed)
    info = _TRAINED[steps, seed]
    shutil.copyfile(info["path"], out)
    return {**info, "path": Path(out)}


def _train_tone_spotter(out: Path, steps: int, seed: int) -> dict:
    """Train the toy tone model and export it to ``out``."""
    import torch

    from liquid_stream import LiquidS4Model
    from liquid_stream.demo import fit_per_step
    from liquid_stream.export.pipeline import export_model
    from liquid_stream.training.tasks import tone_bursts

    t0 = time.perf_counter()
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = LiquidS4Model(
        d_input=1,
        d_output=3,
        d_model=16,
        n_layers=1,
        d_state=7,
        mode="dplr",
        liquid="pb",
        liquid_order=2,
        norm="batch",
        decoder="window",
        decoder_window=80,
        dt_min=1e-3,
        dt_max=0.2,
    )
    x0, _ = tone_bursts(np.random.default_rng(seed + 100), 16, 4000, SR, 0.3)
    mean, std = float((x0 * SCALE).mean()), float((x0 * SCALE).std())

    def batches():
        x, y = tone_bursts(rng, 8, 2000, SR, 0.3)
        return ((x * SCALE - mean) / std).astype(np.float32), y

    fit_per_step(model, batches, steps, lr=1e-2)
    model.eval()
    x, y = tone_bursts(np.random.default_rng(seed + 1), 4, 8000, SR, 0.3)
    with torch.no_grad():
        pred = model(torch.from_numpy((x * SCALE - mean) / std)).argmax(-1).numpy()
    meta = {
        "task": "toy",
        "labels": LABELS,
        "sample_rate": SR,
        "silence_class": 0,
        "input_mean": [mean],
        "input_std": [std],
    }
    export_model(model, out, chunk=80, meta=meta)
    return {
        "path": Path(out),
        "accuracy": float((pred == y).mean()),
        "train_s": time.perf_counter() - t0,
    }


def export_regression_model(out: str | Path) -> Path:
    """A tiny untrained 2-input regression model (task "bidmc"): the wrong kind for KWS."""
    import torch

    from liquid_stream import LiquidS4Model
    from liquid_stream.export.pipeline import export_model

    torch.manual_seed(0)
    model = LiquidS4Model(
        d_input=2,
        d_output=1,
        d_model=8,
        n_layers=1,
        d_state=4,
        mode="dplr",
        liquid="pb",
        liquid_order=2,
        norm="batch",
        decoder="window",
        decoder_window=8,
    )
    export_model(model, out, chunk=32, meta={"task": "bidmc", "sample_rate": 125})
    return Path(out)


def tone_signal(
    rate: int = SR,
    events=EVENTS,
    seconds: float = STREAM_S,
    noise: float = 0.1,
    amp: float = 0.35,
    seed: int = 0,
) -> np.ndarray:
    """Noise of std ``noise`` with ``amp`` sine bursts (440 / 880 Hz) at ``events``."""
    rng = np.random.default_rng(seed)
    n = int(round(seconds * rate))
    x = noise * rng.standard_normal(n)
    t = np.arange(n) / rate
    for start, dur, label in events:
        f = 440.0 if label == "440 Hz" else 880.0
        a, b = int(round(start * rate)), int(round((start + dur) * rate))
        ramp = np.minimum(1.0, np.minimum(np.arange(b - a) + 1, b - a - np.arange(b - a)) / 40)
        x[a:b] += amp * ramp * np.sin(2 * np.pi * f * t[a:b])
    return x


def write_tone_wav(path: str | Path, rate: int = SR, **kw) -> Path:
    write_wav(path, tone_signal(rate, **kw), rate)
    return Path(path)


def write_labels_csv(path: str | Path, events=EVENTS) -> Path:
    rows = ["start_s,end_s,word,is_keyword"]
    rows += [f"{s:.3f},{s + d:.3f},{w},1" for s, d, w in events]
    Path(path).write_text("\n".join(rows) + "\n")
    return Path(path)


# One printed detection of `liquid-stream kws`: "HH:MM:SS.mmm  keyword  score".
DETECTION_LINE = re.compile(r"^(\d\d):(\d\d):(\d\d)\.(\d{3})  (.+?)  ([0-9.]+)$")


def parse_detections(out: str, with_score: bool = True) -> list[tuple]:
    """The detections printed by ``kws``: ``(time_s, keyword, score)`` (or without score)."""
    dets = []
    for line in out.splitlines():
        m = DETECTION_LINE.match(line.strip())
        if m:
            h, mi, s, ms = (int(v) for v in m.groups()[:4])
            t = 3600 * h + 60 * mi + s + ms / 1000
            dets.append((t, m.group(5), float(m.group(6))) if with_score else (t, m.group(5)))
    return dets


def sigint_default() -> None:
    """``preexec_fn`` of an app run as a child that a test stops with Ctrl-C (SIGINT): the
    tests may run as a background job of a non-interactive shell, which starts them with
    SIGINT ignored, and an ignored signal stays ignored across exec."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
