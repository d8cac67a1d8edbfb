"""The logs of a run in its folder: ``metrics.csv`` (one row per validation), ``steps.csv``
(loss and lr of every optimizer step), ``tb/`` (TensorBoard, when installed) and
``curves.png``.

Rows are appended, and each checkpoint records how many rows of each CSV it covers
(:data:`LOG_FILES`); a resumed run cuts the logs back to those rows (a row written after
the checkpoint is redone) and TensorBoard purges the steps after them, so the logs of a
killed-and-resumed run match an uninterrupted run's row for row."""

from __future__ import annotations

import csv
import io
import math
import os
import time
from pathlib import Path

import numpy as np

LOG_FILES = ("metrics.csv", "steps.csv")  # row counts recorded in every checkpoint


class RunLog:
    """The CSV logs, TensorBoard scalars and curves.png of the run in ``out``; only the
    process with ``enabled`` (rank 0) writes."""

    def __init__(self, out: Path, enabled: bool, loss_kind: str, plot_every_s: float):
        self.out, self.enabled, self.loss_kind = out, enabled, loss_kind
        self.plot_every_s = plot_every_s
        self.rows = dict.fromkeys(LOG_FILES, 0)  # rows in metrics.csv / steps.csv
        self.ready = False  # started afresh, or cut to the resumed checkpoint
        self._tb_purge: int | None = None  # TensorBoard purge_step (resume / fresh start)
        self._tb_checked = False
        self._writer = None
        self._last_plot: float | None = None

    def sync(self, rows: dict | None, step: int) -> None:
        """On resume: cut metrics.csv / steps.csv to the ``rows`` the checkpoint covers
        (rows written after it — an epoch row whose last.pt was never written — are
        redone); TensorBoard purges every step after the last kept validation row. A
        checkpoint without row counts (``rows`` None) covers the rows up to its ``step``."""
        self.ready = True
        if not self.enabled:
            return
        for name in LOG_FILES:
            path = self.out / name
            if rows is None:
                n = 0
                for r in csv_rows(path):
                    if not str(r.get("step", "")).isdigit() or int(r["step"]) > step:
                        break
                    n += 1
            else:
                n = int(rows.get(name, 0))
            self.rows[name] = cut_csv(path, n)
        kept = csv_rows(self.out / "metrics.csv")
        self._tb_purge = int(kept[-1]["step"]) + 1 if kept else 0

    def start(self) -> None:
        """A run that did not resume starts its logs afresh (rows already in ``out``
        belong to a killed or older run)."""
        if self.ready:
            return
        self.ready = True
        if not self.enabled:
            return
        for name in LOG_FILES:
            self.rows[name] = cut_csv(self.out / name, 0)
        tb = self.out / "tb"
        self._tb_purge = 0 if tb.is_dir() and any(tb.iterdir()) else None

    def append(self, name: str, row: dict) -> None:
        """One row of ``name`` (metrics.csv or steps.csv), with a header when new."""
        if not self.enabled:
            return
        path = self.out / name
        new = not path.is_file() or path.stat().st_size == 0
        with open(path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(row))
            if new:
                w.writeheader()
            w.writerow(row)
        self.rows[name] = self.rows.get(name, 0) + 1

    def validation(self, row: dict) -> None:
        """A metrics.csv row, and its finite scalars to TensorBoard at ``row["step"]``."""
        self.append("metrics.csv", row)
        writer = self._tb()
        if writer is not None:
            for k, v in row.items():
                if k not in ("epoch", "step") and isinstance(v, float) and math.isfinite(v):
                    writer.add_scalar(k, v, row["step"])
            writer.flush()

    def _tb(self):
        if not self._tb_checked:
            self._tb_checked = True
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._writer = SummaryWriter(str(self.out / "tb"), purge_step=self._tb_purge)
            except ImportError:
                print(
                    "note: tensorboard is not installed; skipping TensorBoard logs "
                    "(metrics.csv and curves.png are still written)"
                )
        return self._writer

    def plot(self, force: bool) -> None:
        """Redraw curves.png (at most every ``plot_every_s`` seconds, and at the end)."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and self._last_plot is not None and now - self._last_plot < self.plot_every_s:
            return
        if not (self.out / "metrics.csv").is_file():
            return
        self._last_plot = now
        try:
            plot_curves(self.out / "metrics.csv", self.out / "curves.png", self.loss_kind)
        except Exception as e:  # noqa: BLE001 - a plot must never stop training
            print(f"note: could not draw curves.png: {e}")

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def csv_rows(path: Path) -> list[dict]:
    """The complete rows of a CSV log (a row cut short by a kill is not one)."""
    if not path.is_file():
        return []
    data = path.read_bytes()
    text = data[: data.rfind(b"\n") + 1].decode("utf-8", errors="replace")
    return list(csv.DictReader(io.StringIO(text, newline="")))


def cut_csv(path: Path, rows: int) -> int:
    """Cut a CSV log to its header and first ``rows`` complete rows (all of them when it
    has fewer) with a single truncate; returns the number of rows kept."""
    if not path.is_file():
        return 0
    data = path.read_bytes()
    lines = data.split(b"\n")[:-1]  # complete lines (the last piece has no newline)
    keep = min(rows + 1, len(lines)) if rows > 0 else 0
    size = sum(len(line) + 1 for line in lines[:keep])
    if size != len(data):
        os.truncate(path, size)
    kept = max(keep - 1, 0)
    if kept < rows:
        print(f"note: {path.name} has {kept} rows, the checkpoint covers {rows}")
    return kept


def plot_curves(metrics_csv, png, loss_kind: str = "ce") -> None:
    """Loss (train/val) and accuracy or RMSE against epoch, from ``metrics.csv``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(metrics_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return
    ep = [float(r["epoch"]) for r in rows]

    def col(name):
        return [float(r[name]) if r.get(name) not in (None, "") else np.nan for r in rows]

    from .metrics import REGRESSION

    metric = "rmse" if loss_kind in REGRESSION else "acc"
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    for split in ("train", "val"):
        if f"{split}_loss" in rows[0]:
            ax[0].plot(ep, col(f"{split}_loss"), "o-", ms=3, label=split)
        if f"{split}_{metric}" in rows[0]:
            ax[1].plot(ep, col(f"{split}_{metric}"), "o-", ms=3, label=split)
    ax[0].set(xlabel="epoch", ylabel="loss", title="loss")
    ax[1].set(xlabel="epoch", ylabel=metric, title=metric)
    for a in ax:
        a.grid(alpha=0.3)
        a.legend()
    fig.tight_layout()
    tmp = Path(png).with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(png)
