"""Evaluation of the vital-sign regressors (task ``bidmc``): RMSE / MAE in physical units,
scatter + Bland–Altman plot, and NeuroKit2's classical estimate on the same windows.

    liquid-stream evaluate runs/bidmc-hr-cpu/best.pt runs/bidmc-hr-shuffled/best.pt --baseline

Each checkpoint is scored on the test split of *its own* protocol (``record``: no
recording shared with training; ``shuffled``: windows of the same recordings in train and
test, the paper's protocol), so passing one checkpoint per protocol prints both side by
side. Bland–Altman: the difference (estimate − reference) against their mean, with the
bias and the 95 % limits of agreement bias ± 1.96 sd.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import click
import numpy as np
import torch

from liquid_stream.io.bidmc_vocab import WITHIN
from liquid_stream.runtime.meta import ensemble_weights

from .data.vitals.bidmc_baseline import agreement, baseline_estimates, baseline_name


class MeanOf(torch.nn.Module):
    """The mean of several estimators' outputs, y = (1/K) Σ_i f_i(x) (batch, L, d), or with
    ``weights`` (positive, divided by their sum) y = Σ_i w_i f_i(x): what an ensemble graph
    of regressors computes (export/ensemble.py), scored here as one model.

    Members whose front ends pool by different hops give different numbers of frames; their
    mean is then taken per input sample, each member's output held from the last frame it
    completed (``forward_steps``, what its graph emits), so row t of y is the ensemble
    graph's output at sample t."""

    def __init__(self, members: list[torch.nn.Module], weights: list[float] | None = None):
        super().__init__()
        self.members = torch.nn.ModuleList(members)
        self.weights = ensemble_weights(weights, len(members))  # None: the plain mean

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if len({getattr(m, "hop", 1) for m in self.members}) > 1:
            ys = torch.stack([m.forward_steps(x) for m in self.members])  # (K, B, L, d)
        else:
            ys = torch.stack([m(x) for m in self.members])
        if self.weights is None:
            return ys.mean(0)
        return torch.tensordot(ys.new_tensor(self.weights), ys, dims=1)


def predict_windows(
    model: torch.nn.Module, dataset, device: torch.device, batch_size: int = 32
) -> tuple[np.ndarray, np.ndarray]:
    """The model's estimate for every window (the last step of a ``window`` decoder, the
    pooled output otherwise) and the targets, both ``(n,)`` float64."""
    from torch.utils.data import DataLoader

    preds, ys = [], []
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for x, y in DataLoader(dataset, batch_size=batch_size, shuffle=False):
            out = model(x.to(device)).double()
            out = out[:, -1] if out.dim() == 3 else out
            preds.append(out[:, 0].cpu().numpy())
            ys.append(y.double().reshape(-1).numpy())
    model.train(was_training)
    return np.concatenate(preds), np.concatenate(ys)


def plot_agreement(
    pred: np.ndarray,
    y: np.ndarray,
    units: str,
    title: str,
    path: Path,
    baseline: tuple[str, np.ndarray] | None = None,
) -> None:
    """Scatter (estimate vs reference, identity line) and Bland–Altman panels; ``baseline``:
    the classical estimate's (name, values) beside the model's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.6))
    series = [("Liquid-S4", pred, "tab:blue")]
    if baseline is not None and np.isfinite(baseline[1]).any():
        series.append((*baseline, "tab:orange"))
    lo = np.nanmin([np.nanmin(y)] + [np.nanmin(p) for _, p, _ in series])
    hi = np.nanmax([np.nanmax(y)] + [np.nanmax(p) for _, p, _ in series])
    for label, p, color in series:
        e = agreement(p, y)
        ok = np.isfinite(p)
        ax1.scatter(
            y[ok],
            p[ok],
            s=6,
            alpha=0.5,
            color=color,
            label=f"{label}: RMSE {e['rmse']:.2f} (n={e['n']})",
        )
        mean, diff = (p[ok] + y[ok]) / 2, p[ok] - y[ok]
        ax2.scatter(mean, diff, s=6, alpha=0.5, color=color, label=label)
        for v, style in (
            (e["bias"], "-"),
            (e["bias"] + e["loa"], "--"),
            (e["bias"] - e["loa"], "--"),
        ):
            ax2.axhline(v, color=color, linestyle=style, linewidth=1)
    ax1.plot([lo, hi], [lo, hi], "k-", linewidth=0.8)
    ax1.set(xlabel=f"reference ({units})", ylabel=f"estimate ({units})", title=title)
    ax1.legend(fontsize=8)
    ax2.set(
        xlabel=f"mean of estimate and reference ({units})",
        ylabel=f"estimate − reference ({units})",
        title="Bland–Altman (bias, ±1.96 sd)",
    )
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def evaluate_vitals(
    model,
    meta: dict,
    cfg: dict,
    stats,
    split: str,
    device,
    batch_size: int,
    out: Path,
    baseline: bool = False,
    name: str = "",
) -> list[dict]:
    """Score one bidmc checkpoint on SPLIT of its protocol; prints and returns a table row."""
    from .tasks import bidmc_split_seed, bidmc_windows, build_bidmc

    # windows here (the stream is scored below); the train crops' augmentations need crops
    # and touch no scored window, so they are off (a pulse_eq run was refused here), and
    # the extra training folders hold no val / test record
    d = {**cfg["data"], "crop_s": None, "pulse_eq": 0.0, "channel_off": 0.0, "extra_train": []}
    cfg = {**cfg, "data": d}
    scalenorm = ((cfg.get("model") or {}).get("frontend") or {}).get("kind") == "scalenorm"
    # only the scored split's samples are held (the train split's feed no statistics here)
    only = split if stats is not None or scalenorm else None
    windows = bidmc_windows(d, bidmc_split_seed(cfg), only=only)
    fmt, root, *splits = windows
    w = splits[2] if split == "test" else splits[1]
    sets = build_bidmc(cfg, stats=stats, windows=windows)
    ds = sets[2] if split == "test" else sets[1]
    if len(ds) == 0:
        raise ValueError(f"the {split} split of {root} has no windows")
    pred, y = predict_windows(model, ds, device, batch_size)
    target, units = meta.get("target", d["target"]), meta.get("units", "")
    tol = WITHIN.get(target)
    res = agreement(pred, y, tol)
    tag = f"{target} {split} ({d['protocol']} split, {fmt}, {res['n']} windows)"
    click.echo(
        f"{tag}: RMSE {res['rmse']:.3f} {units}, MAE {res['mae']:.3f} {units}, "
        f"bias {res['bias']:+.3f} ± {res['loa']:.3f} (95% LoA), slope "
        f"{res['slope']:.3f}, within ±{tol:g}: {100 * res['within']:.1f} %"
    )
    row = {
        "model": name,
        "target": target,
        "units": units,
        "protocol": d["protocol"],
        "format": fmt,
        "split": split,
        **res,
    }
    base = None
    if baseline:
        base = np.asarray(baseline_estimates(root, w, target), np.float64)
        b = agreement(base, y, tol)
        valid = np.isfinite(base)
        same = agreement(pred[valid], y[valid], tol)
        row.update({f"baseline_{k}": b[k] for k in ("rmse", "mae", "bias", "slope", "within")})
        row.update(
            baseline_n=b["n"],
            model_rmse_on_baseline_windows=same["rmse"],
            model_within_on_baseline_windows=same["within"],
        )
        bn = baseline_name(target)
        if b["n"] == 0:
            click.echo(f"  {bn} baseline: n/a for {target} (no classical estimate)")
        else:
            click.echo(
                f"  {bn} baseline: RMSE {b['rmse']:.3f} {units}, MAE {b['mae']:.3f} "
                f"{units}, bias {b['bias']:+.3f}, slope {b['slope']:.3f}, within ±{tol:g}: "
                f"{100 * b['within']:.1f} % on {b['n']}/{len(y)} windows (failures "
                f"excluded; the model on those windows: RMSE {same['rmse']:.3f}, within "
                f"{100 * same['within']:.1f} %)"
            )
    if fmt == "wfdb":
        st = stream_agreement(
            model,
            root,
            sorted({str(r) for r in w.record}),
            d,
            target,
            device,
            tol,
            (ds.mean, ds.std),
        )
        row["stream"] = st
        click.echo(
            f"  streamed over the whole {split} records (state from each record's start, "
            f"reset at NaN gaps), every second: RMSE {st['rmse']:.3f} {units}, MAE "
            f"{st['mae']:.3f}, bias {st['bias']:+.3f}, within ±{tol:g}: "
            f"{100 * st['within']:.1f} % ({st['n']} s)"
        )
    by = condition_rows(root, w, d, pred, y, base, target, tol)
    if by:
        row["by_condition"] = by
        label = baseline_name(target) if base is not None else None
        click.echo(format_conditions(by, units, label))
    stem = out / f"agreement_{target}_{d['protocol']}_{split}"
    plot_agreement(
        pred,
        y,
        units,
        f"{target} {split}, {d['protocol']} split",
        stem.with_suffix(".png"),
        None if base is None else (baseline_name(target), base),
    )
    stem.with_suffix(".json").write_text(json.dumps(row, indent=1) + "\n")
    click.echo(f"  scatter + Bland–Altman: {stem}.png (numbers: {stem}.json)")
    return [row]


def stream_agreement(
    model,
    root,
    records: list[str],
    d: dict,
    target: str,
    device,
    tol: float | None,
    norm: tuple[np.ndarray, np.ndarray] = (np.zeros(1), np.ones(1)),
) -> dict:
    """The model as the monitor runs it: each record streamed from its start (the forward
    over a whole finite stretch equals the step-by-step stream; a NaN gap ends a stretch
    and the next starts from a zero state), scored every second that has a full window
    behind it inside its stretch against that window's label (the mean of the 1 Hz
    numerics over it, as for windows: training/data/vitals/bidmc_crops.py ``crop_targets``)."""
    from liquid_stream.io.bidmc_vocab import TARGETS

    from .data.vitals.bidmc import _numeric, read_record
    from .data.vitals.bidmc_crops import crop_targets

    window, fs = int(d["window"]), int(d["sample_rate"])
    preds, ys = [], []
    was_training = model.training
    model.eval()
    for name in records:
        sig, rate, num = read_record(root, name, tuple(d["channels"]), fs)
        values = _numeric(num, TARGETS[target][0], name)
        finite = np.isfinite(sig).all(axis=1)
        edges = np.flatnonzero(np.diff(np.r_[0, finite.astype(np.int8), 0]))
        for a, b in zip(edges[::2], edges[1::2], strict=True):  # finite stretches [a, b)
            if b - a < window:
                continue
            lab = crop_targets(values, int(a), int(b - a), window, rate, float(d["min_valid"]))
            at = np.flatnonzero(np.isfinite(lab))
            x = (sig[a:b] - norm[0]) / norm[1]  # the input standardisation of the windows
            x = torch.from_numpy(np.ascontiguousarray(x, np.float32))[None]
            with torch.no_grad():
                out = model(x.to(device))[0, :, 0].double().cpu().numpy()  # (frames,)
            r = (b - a) // len(out)
            preds.append(out[(at + 1) // r - 1])
            ys.append(lab[at])
    model.train(was_training)
    pred, y = (np.concatenate(v) if v else np.zeros(0) for v in (preds, ys))
    return agreement(pred, y, tol)


def condition_rows(
    root,
    w,
    d: dict,
    pred: np.ndarray,
    y: np.ndarray,
    base: np.ndarray | None,
    target: str,
    tol: float | None,
) -> dict[str, dict]:
    """Per hard condition of a randomised record set (training/data/vitals/vitals_conditions.py):
    windows, the model's RMSE and share within tolerance, and NeuroKit2's on its valid
    windows among them. Empty for other data."""
    from .data.vitals.vitals_conditions import window_conditions

    masks = window_conditions(
        root, w.record, w.start, int(d["window"]), float(d["sample_rate"]), y, target
    )
    out: dict[str, dict] = {}
    for name, m in (masks or {}).items():
        if not m.any():
            continue
        e = agreement(pred[m], y[m], tol)
        r = {"n": int(m.sum()), "rmse": e["rmse"], "within": e["within"]}
        if base is not None:
            b = agreement(base[m], y[m], tol)
            r.update(baseline_n=b["n"], baseline_rmse=b["rmse"], baseline_within=b["within"])
        out[name] = r
    return out


def format_conditions(by: dict[str, dict], units: str, baseline: str | None) -> str:
    """The per-condition rows as an indented plain-text table; ``baseline``: the classical
    estimate's name, for its columns (None: no such columns)."""

    def f(v, pct=False):
        if v is None or not math.isfinite(v):
            return "n/a"
        return f"{100 * v:.1f} %" if pct else f"{v:.2f}"

    head = f"  {'condition':<18} {'n':>5}  {'RMSE ' + units:>11} {'within':>7}"
    head += f"  {baseline + ' RMSE':>14} {'within':>7}" if baseline else ""
    lines = ["  by condition of the randomised records (one window may have several):", head]
    for name, r in by.items():
        line = f"  {name:<18} {r['n']:>5}  {f(r['rmse']):>11} {f(r['within'], True):>7}"
        if baseline:
            line += f"  {f(r['baseline_rmse']):>14} {f(r['baseline_within'], True):>7}"
        lines.append(line)
    return "\n".join(lines)


def format_table(rows: list[dict]) -> str:
    """A plain-text table: one line per evaluated checkpoint."""

    def f(v):
        return (
            "n/a"
            if v is None or (isinstance(v, float) and not math.isfinite(v))
            else (f"{v:.3f}" if isinstance(v, float) else str(v))
        )

    cols = ["model", "target", "protocol", "format", "split", "n", "rmse", "mae"]
    if any("baseline_rmse" in r for r in rows):
        cols += ["baseline_rmse", "baseline_mae", "baseline_n"]
    cells = [[f(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)
