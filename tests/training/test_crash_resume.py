"""Crash consistency of the trainer: real SIGKILLs of `liquid-stream train` at random steps
and between its writes, then `train --resume last.pt` until done, must leave the same
metrics.csv, steps.csv, TensorBoard scalars, last.pt and best.pt (and the same final
"test (best.pt)") as an uninterrupted run with the same seed."""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import random
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

from liquid_stream.nn.checkpoint import BEST_KEY
from liquid_stream.training.trainer import KILL_ENV

pytestmark = pytest.mark.slow

# toy, 16 train examples, batch 4: 4 steps per epoch, 4 epochs = 16 steps; last.pt every
# 2 steps (so the in-loop last.pt at an epoch's last step precedes that epoch's row).
# lr 0.1 makes val_bacc improve after epoch 1 and, for most seeds, peak before the last
# epoch: best.pt then holds other weights than last.pt, and an earlier best.pt exists to go
# stale. Which seeds do so depends on float rounding (another CPU, another memory layout),
# so the reference fixture takes the first seed whose run has that property (SEED) and the
# best step is read from it, never fixed here.
ARGS = [
    "train",
    "toy",
    "--preset",
    "tiny",
    "--device",
    "cpu",
    "--set",
    "model.d_model=8",
    "--set",
    "data.length=128",
    "--set",
    "optim.epochs=4",
    "--set",
    "optim.lr=0.1",
    "--set",
    "optim.warmup_steps=2",
    "--set",
    "train.threads=1",
    "--set",
    "train.progress=false",
    "--set",
    "train.save_every_steps=2",
]
STEPS, STEPS_PER_EPOCH = 16, 4
SEED: list[str] = []  # ["--set", "train.seed=S"]: the reference fixture's choice
EPOCH_ENDS = range(STEPS_PER_EPOCH, STEPS + 1, STEPS_PER_EPOCH)


# Every run is a real process running the real CLI (`liquid-stream train ...`), forked from
# a multiprocessing fork server that has the heavy modules imported already (about 2 s of
# imports saved per run; a run itself takes about 1 s). The hook kills are the trainer's
# own os.kill(SIGKILL) at a named point; the outside kills are SIGKILLs sent from here.
PRELOAD = [
    "torch",
    "liquid_stream.cli",
    "liquid_stream.training.cli",
    "liquid_stream.training.tasks",
    "liquid_stream.training.trainer",
    "torch.utils.tensorboard",
    "matplotlib.pyplot",
]
CTX = multiprocessing.get_context("forkserver")
CTX.set_forkserver_preload(PRELOAD)


def _child(argv: list[str], kill_at: str | None, log: str) -> None:
    if kill_at:
        os.environ[KILL_ENV] = kill_at
    else:
        os.environ.pop(KILL_ENV, None)
    sys.stdout = sys.stderr = open(log, "w", buffering=1)  # the log of this child
    from liquid_stream.cli import main

    main.main(args=argv, prog_name="liquid-stream")  # exits with the command's status


def start(out: Path, kill_at: str | None = None) -> tuple[multiprocessing.Process, Path]:
    """Start `liquid-stream train` on ``out``: resumed from last.pt when there is one, else
    afresh (a kill before the first checkpoint leaves nothing to resume)."""
    resume = ["--resume", str(out / "last.pt")] if (out / "last.pt").is_file() else []
    log = out.parent / f"{out.name}-{len(list(out.parent.glob(f'{out.name}-*.log')))}.log"
    proc = CTX.Process(
        target=_child, args=([*ARGS, *SEED, "--out", str(out), *resume], kill_at, str(log))
    )
    proc.start()
    return proc, log


def run(out: Path, kill_at: str | None = None) -> str:
    """One `train` process to its end; with ``kill_at`` the trainer's hook SIGKILLs it
    there. Returns its output."""
    proc, log = start(out, kill_at)
    proc.join(300)
    text = log.read_text()
    want = -signal.SIGKILL if kill_at else 0
    assert proc.exitcode == want, (kill_at, proc.exitcode, text)
    return text


def _rows(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def kill_when_steps_logged(out: Path, n: int) -> int:
    """Start a `train` process and SIGKILL it from outside as soon as steps.csv holds ``n``
    rows: wherever it happens to be then. Returns the exit code (0 if it ended first)."""
    proc, log = start(out)
    deadline = time.monotonic() + 300
    try:
        while proc.is_alive() and time.monotonic() < deadline:
            try:
                logged = (out / "steps.csv").read_bytes().count(b"\n") - 1
            except FileNotFoundError:
                logged = 0
            if logged >= n:
                proc.kill()
                break
            time.sleep(0.001)
        proc.join(300)
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()
    assert proc.exitcode in (0, -signal.SIGKILL), log.read_text()
    return proc.exitcode


def _ckpt(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def _resume_step(out: Path) -> int:
    return _ckpt(out / "last.pt")["trainer"]["step"] if (out / "last.pt").is_file() else 0


def _tensors(obj, prefix=""):
    """Flatten the tensors and numbers of a nested dict/list (for exact comparison)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _tensors(v, f"{prefix}/{k}")
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{prefix}/{i}")
    else:
        yield prefix, obj


def _same_state(a: dict, b: dict, what: str) -> None:
    """Model, optimizer, schedule, sampler, RNG and best-model bookkeeping all equal."""
    ta, tb = a["trainer"], b["trainer"]
    for key in ("step", "epoch", "batch_in_epoch", "best", "best_epoch"):
        assert ta[key] == tb[key], (what, key, ta[key], tb[key])
    for part in ("model", "trainer"):
        fa = {k: v for k, v in _tensors(a[part], part) if not k.endswith("elapsed_s")}
        fb = {k: v for k, v in _tensors(b[part], part) if not k.endswith("elapsed_s")}
        assert fa.keys() == fb.keys(), (what, part)
        for k, v in fa.items():
            if isinstance(v, torch.Tensor):
                assert torch.equal(v, fb[k]), (what, k)
            else:
                assert v == fb[k], (what, k, v, fb[k])


def _tb_scalars(tb: Path) -> dict | None:
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        return None
    acc = EventAccumulator(str(tb))
    acc.Reload()
    return {
        tag: [(e.step, e.value) for e in acc.Scalars(tag)]
        for tag in acc.Tags()["scalars"]
        if tag != "time_s"
    }


def assert_same_run(ref: Path, out: Path) -> None:
    no_time = [{k: v for k, v in r.items() if k != "time_s"} for r in _rows(ref / "metrics.csv")]
    got = [{k: v for k, v in r.items() if k != "time_s"} for r in _rows(out / "metrics.csv")]
    assert got == no_time, "metrics.csv differs from the uninterrupted run"
    assert _rows(out / "steps.csv") == _rows(ref / "steps.csv"), "steps.csv differs"
    assert _tb_scalars(out / "tb") == _tb_scalars(ref / "tb"), "TensorBoard scalars differ"
    last, best = _ckpt(out / "last.pt"), _ckpt(out / "best.pt")
    _same_state(_ckpt(ref / "last.pt"), last, "last.pt")
    _same_state(_ckpt(ref / "best.pt"), best, "best.pt")
    best_step = _ckpt(ref / "best.pt")["trainer"]["step"]
    assert best["trainer"]["step"] == best_step == last["trainer"]["best_step"]
    assert last["trainer"]["best_epoch"] == best_step / STEPS_PER_EPOCH
    ref_test = json.loads((ref / "test_metrics.json").read_text())
    assert json.loads((out / "test_metrics.json").read_text()) == ref_test  # test (best.pt)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The uninterrupted run of the first seed whose best epoch is neither the first nor
    the last (see ARGS); every run of this module then uses that seed."""
    root, texts = tmp_path_factory.mktemp("crash"), []
    for seed in range(8):
        SEED[:] = ["--set", f"train.seed={seed}"]
        out = root / f"uninterrupted-{seed}"
        text = run(out)
        rows = _rows(out / "metrics.csv")
        assert [int(r["step"]) for r in rows] == list(EPOCH_ENDS)
        assert len(_rows(out / "steps.csv")) == STEPS
        best = _ckpt(out / "best.pt")["trainer"]["step"]
        assert best in EPOCH_ENDS and f"best_epoch={best / STEPS_PER_EPOCH:.4f}" in text, text
        if STEPS_PER_EPOCH < best < STEPS:
            return out
        texts.append(text)
    raise AssertionError("no seed of 0..7 has its best epoch inside the run:\n" + "\n".join(texts))


def test_random_kills_then_resume_match_an_uninterrupted_run(reference, tmp_path):
    """A kill before the first checkpoint (fresh restart), then kills at random steps and
    random points — the trainer's named points and wherever an outside SIGKILL lands
    when steps.csv reaches a random row — each followed by `--resume last.pt`."""
    out = tmp_path / "run"
    rng = random.Random(20240607)
    run(out, "after_step_row:step=1")
    assert not (out / "last.pt").exists()
    kills = ["after_step_row:step=1"]  # printed: pytest shows it when the test fails
    for i, step in enumerate(sorted(rng.sample(range(2, STEPS), 3))):
        done, logged = _resume_step(out), len(_rows(out / "steps.csv"))
        if i % 2:  # from outside, wherever the process is once steps.csv has n rows
            n = max(step, logged + 1)
            if n <= STEPS:
                kills.append(f"outside at {n} steps logged: exit {kill_when_steps_logged(out, n)}")
        else:  # at one of the trainer's named points (an epoch's end for the last two)
            point = rng.choice(["after_step_row", "after_epoch_row", "after_last_ckpt"])
            if point != "after_step_row":
                step = -(-step // STEPS_PER_EPOCH) * STEPS_PER_EPOCH
            step = max(step, done + 1)
            if step <= STEPS and (point == "after_step_row" or step % STEPS_PER_EPOCH == 0):
                kills.append(f"{point}:step={step}")
                run(out, kills[-1])
        print("kills so far:", kills, "; last.pt at step", _resume_step(out))
    run(out)
    assert_same_run(reference, out)


def test_kill_between_last_and_best_checkpoint(reference, tmp_path):
    """SIGKILL after last.pt (at the reference's best epoch: a new best) but before best.pt:
    the resumed run must restore best.pt from last.pt, report that best epoch and test
    that epoch's model."""
    out = tmp_path / "run"
    best = _ckpt(reference / "best.pt")["trainer"]["step"]
    run(out, f"after_last_ckpt:step={best}")
    assert _ckpt(out / "last.pt")["trainer"]["step"] == best
    assert _ckpt(out / "best.pt")["trainer"]["step"] < best  # the kill left it stale
    text = run(out)
    assert_same_run(reference, out)
    assert f"best_epoch={best / STEPS_PER_EPOCH:.4f}" in text and "rewrote" in text, text


def test_kill_after_epoch_row_before_last_checkpoint(reference, tmp_path):
    """SIGKILL after epoch rows were logged but before their last.pt (epochs 1 and 2, where
    an in-loop last.pt at the same step exists): no duplicated or missing rows."""
    out = tmp_path / "run"
    run(out, f"after_epoch_row:step={STEPS_PER_EPOCH}")
    run(out, f"after_epoch_row:step={2 * STEPS_PER_EPOCH}")
    run(out)
    assert_same_run(reference, out)


def test_resume_cuts_partial_rows_and_restores_a_missing_best(reference, tmp_path):
    """A finished run resumed again: rows beyond last.pt (one cut short by a kill) go, a
    missing best.pt comes back from last.pt; a checkpoint without row counts (older
    trainer) keeps the rows up to its step."""
    for legacy in (False, True):
        out = tmp_path / f"legacy{legacy}"
        shutil.copytree(reference, out)
        with open(out / "steps.csv", "a") as f:
            f.write("17,5,0.5,0.001\r\n18,5,0.")
        with open(out / "metrics.csv", "a") as f:
            f.write("5.0,20,0.001,0.9")
        if legacy:
            ckpt = _ckpt(out / "last.pt")
            for key in ("best_step", "logs"):
                del ckpt["trainer"][key]
            del ckpt[BEST_KEY]
            torch.save(ckpt, out / "last.pt")
        else:
            (out / "best.pt").unlink()
        run(out)
        assert _rows(out / "steps.csv") == _rows(reference / "steps.csv")
        assert _rows(out / "metrics.csv") == _rows(reference / "metrics.csv")
        _same_state(_ckpt(reference / "best.pt"), _ckpt(out / "best.pt"), "best.pt")
