"""End-to-end demo on an embedded synthetic task: train → export → verify → stream.

    python -m liquid_stream.demo [--steps 300] [--out runs/demo]

Task: a 8 kHz signal of noise with tone bursts (440 Hz or 880 Hz, random lengths and
levels); the model labels every sample as silence / low tone / high tone with a
causal window decoder. A causal Liquid-S4 (DPLR S4-LegS, N = 7, PB p = 2) is trained
with the convolutional form, exported to its exact step-wise ONNX graph, checked
against the convolutional forward (docs/design.md §5 contract), and then run through
:class:`~liquid_stream.OnnxStreamer` in 10 ms chunks as if live. Prints accuracy,
the exactness check and the real-time factor; writes a checkpoint, the ONNX file and
a PNG of a streamed stretch.

An entry point of the layering rule (tests/test_layering.py): the tour runs every layer —
the signal of :mod:`liquid_stream.training.data.tones`, the exporter of
:mod:`liquid_stream.export.pipeline` — so it may import them; the core never does.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from liquid_stream import LiquidS4Model, OnnxStreamer, make_optimizer
from liquid_stream.export.pipeline import export_model, verify_onnx
from liquid_stream.nn.checkpoint import save_checkpoint
from liquid_stream.training.data.tones import TONE_LABELS, tone_bursts

SR = 8000
LABELS = list(TONE_LABELS)


def make_batch(rng: np.random.Generator, batch: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """Noise with non-overlapping tone bursts; per-sample labels (0 = none, 1/2 = tone):
    :func:`~liquid_stream.training.data.tones.tone_bursts` with the tour's fixed lengths
    (first burst within 50 ms, bursts 37.5-150 ms, gaps 37.5-187.5 ms at 8 kHz)."""
    return tone_bursts(
        rng, batch, length, SR, 0.3, start=(0, 400), dur=(300, 1200), gap=(300, 1500)
    )


def per_step_accuracy(pred: np.ndarray, y: np.ndarray, skip: int = 120) -> float:
    """Accuracy ignoring the first ``skip`` samples after every label change (onset latency)."""
    change = np.zeros_like(y, dtype=bool)
    change[:, 1:] = y[:, 1:] != y[:, :-1]
    mask = np.ones_like(y, dtype=bool)
    for b, t in zip(*np.nonzero(change), strict=True):
        mask[b, t : t + skip] = False
    return float((pred == y)[mask].mean())


def fit_per_step(model, batches, steps: int, lr: float, progress: bool = False) -> None:
    """Train ``model`` on per-step labels: ``batches()`` → ``(x (B, L, 1), y (B, L))``
    numpy; AdamW (SSM group lr 1e-3) with a one-cycle schedule, gradient clipping 1."""
    opt = make_optimizer(model, lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[lr, 1e-3], total_steps=steps)
    it = range(steps)
    if progress:
        try:
            from tqdm import tqdm

            it = tqdm(it, ncols=80)
        except ImportError:  # pragma: no cover
            pass
    model.train()
    for _ in it:
        x, y = batches()
        logits = model(torch.from_numpy(x))
        target = torch.from_numpy(y).reshape(-1)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if hasattr(it, "set_postfix"):
            it.set_postfix(loss=f"{loss.item():.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description="liquid-stream end-to-end demo")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--out", default="runs/demo")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    torch.set_num_threads(2)

    model = LiquidS4Model(
        d_input=1,
        d_output=3,
        d_model=32,
        n_layers=2,
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
    print(
        f"1/4 training {sum(p.numel() for p in model.parameters())} parameters, "
        f"{args.steps} steps of 16 × 0.25 s (conv form)"
    )
    t0 = time.perf_counter()
    fit_per_step(model, lambda: make_batch(rng, 16, 2000), args.steps, lr=5e-3, progress=True)
    model.eval()
    x, y = make_batch(np.random.default_rng(123), 8, 8000)
    with torch.no_grad():
        pred = model(torch.from_numpy(x)).argmax(-1).numpy()
    acc = per_step_accuracy(pred, y)
    print(
        f"   trained in {time.perf_counter() - t0:.0f} s; held-out per-sample accuracy "
        f"{100 * acc:.1f}% (chance ≈ {100 * np.bincount(y.ravel()).max() / y.size:.0f}%)"
    )

    meta = {"task": "tone-demo", "sample_rate": SR, "labels": LABELS}
    save_checkpoint(out / "demo.pt", model, meta=meta)
    print("2/4 exporting the exact step-wise form to ONNX (10 ms chunks)")
    info = export_model(model, out / "demo.onnx", chunk=80, meta=meta)
    print(
        f"   {info['path']}: {info['nodes']} nodes, {info['bytes'] / 1e3:.0f} kB, "
        f"sub-block {info['sub_block']}"
    )
    print("3/4 verifying onnxruntime (random chunk sizes) against the torch conv forward")
    report = verify_onnx(model, out / "demo.onnx", length=16000, meta=meta)
    print(f"   {report}")
    if not report.ok:
        raise SystemExit("exactness contract violated")

    print("4/4 streaming 8 new seconds through OnnxStreamer in 10 ms chunks")
    streamer = OnnxStreamer(out / "demo.onnx", threads=2)
    probs, lat = [], []
    xs, ys = make_batch(np.random.default_rng(7), 1, 8 * SR)
    sig = xs[0]
    for pos in range(0, len(sig), 80):
        t = time.perf_counter()
        logits = streamer.process(sig[pos : pos + 80])
        lat.append(time.perf_counter() - t)
        probs.append(logits)
    logits = np.concatenate(probs)
    stream_acc = per_step_accuracy(logits.argmax(-1)[None], ys)
    lat = np.array(lat)
    rtf = lat.sum() / (len(sig) / SR)
    print(
        f"   streamed accuracy {100 * stream_acc:.1f}%, chunk latency p50 "
        f"{1e3 * np.median(lat):.2f} ms / p95 {1e3 * np.percentile(lat, 95):.2f} ms, "
        f"real-time factor {rtf:.3f}"
    )
    plot(sig[: 2 * SR, 0], ys[0, : 2 * SR], logits[: 2 * SR], out / "demo.png")
    print(f"done: {out}/demo.pt, demo.onnx, demo.png")


def plot(sig: np.ndarray, y: np.ndarray, logits: np.ndarray, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.arange(len(sig)) / SR
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    fig, ax = plt.subplots(2, 1, figsize=(10, 5), sharex=True)
    ax[0].plot(t, sig, lw=0.3, color="0.3")
    ax[0].set(ylabel="input", title="first 2 s, streamed through ONNX in 10 ms chunks")
    for k, name in enumerate(LABELS[1:], start=1):
        ax[1].plot(t, p[:, k], label=f"P({name})")
        ax[1].fill_between(t, 0, (y == k) * 1.0, alpha=0.15, step="post")
    ax[1].set(xlabel="time (s)", ylabel="probability", ylim=(0, 1.05))
    ax[1].legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
