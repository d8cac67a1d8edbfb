"""Data-parallel training on CPU (gloo, 2 processes under torchrun via ``--nproc 2``):
2 processes × batch b make the same updates as 1 process × batch 2b, a checkpoint
written by 2 processes resumes in 1, and only rank 0 writes files."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest
import torch

from liquid_stream.nn.checkpoint import load_checkpoint

pytestmark = pytest.mark.slow

BASE = ["--set", "train.progress=false", "--set", "train.threads=1", "--set", "data.n_train=48"]


def train(out, *args: str) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("WORLD_SIZE", None)
    cmd = [
        sys.executable,
        "-m",
        "liquid_stream.cli",
        "train",
        "toy",
        "--out",
        str(out),
        *BASE,
        *args,
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]


def losses(out) -> list[float]:
    with open(out / "steps.csv", newline="") as f:
        return [float(r["loss"]) for r in csv.DictReader(f)]


def assert_same_state(a, b, tol=2e-5, skip=()):
    sa, sb = load_checkpoint(a)["model"], load_checkpoint(b)["model"]
    assert sa.keys() == sb.keys()
    for k in sa:
        if k.endswith(skip):
            continue
        if sa[k].is_floating_point():
            scale = max(1.0, sa[k].abs().max().item())
            assert (sa[k] - sb[k]).abs().max().item() <= tol * scale, k
        else:
            assert torch.equal(sa[k], sb[k]), k


@pytest.mark.parametrize("norm,accum", [("batch", 1), ("layer", 2)])
def test_two_processes_match_one_with_the_global_batch(tmp_path, norm, accum):
    common = ["--max-steps", "5", "--set", f"model.norm={norm}", "--grad-accum", str(accum)]
    train(tmp_path / "one", "--set", "optim.batch_size=8", *common)
    train(tmp_path / "two", "--set", "optim.batch_size=4", "--nproc", "2", *common)
    one, two = losses(tmp_path / "one"), losses(tmp_path / "two")
    assert len(one) == len(two) == 5  # one row per step: only rank 0 logs
    assert max(abs(a - b) / abs(a) for a, b in zip(one, two, strict=True)) < 1e-5
    # With BatchNorm after it, the encoder bias is invisible to the loss: its gradient is
    # rounding noise, which AdamW's normalisation turns into full-size (different) steps,
    # and the BatchNorm running means follow it. Every other parameter, and the running
    # variances of the synchronised BatchNorm, agree.
    skip = ("encoder.bias", "running_mean") if norm == "batch" else ()
    assert_same_state(tmp_path / "one" / "last.pt", tmp_path / "two" / "last.pt", skip=skip)
    assert sorted(os.listdir(tmp_path / "one")) == sorted(os.listdir(tmp_path / "two"))


def test_checkpoint_of_two_processes_resumes_in_one(tmp_path):
    train(tmp_path / "ref", "--set", "optim.batch_size=8", "--max-steps", "7")
    train(tmp_path / "two", "--set", "optim.batch_size=4", "--nproc", "2", "--max-steps", "3")
    state = load_checkpoint(tmp_path / "two" / "last.pt")["trainer"]
    assert (state["world_size"], state["step"]) == (2, 3)
    train(
        tmp_path / "two",
        "--resume",
        str(tmp_path / "two" / "last.pt"),
        "--set",
        "optim.batch_size=8",
        "--max-steps",
        "7",
    )
    ref, resumed = losses(tmp_path / "ref"), losses(tmp_path / "two")
    assert len(resumed) == 7
    assert max(abs(a - b) / abs(a) for a, b in zip(ref, resumed, strict=True)) < 1e-5
    skip = ("encoder.bias", "running_mean")  # see above (toy uses BatchNorm)
    assert_same_state(tmp_path / "ref" / "last.pt", tmp_path / "two" / "last.pt", skip=skip)


def test_resume_refuses_another_global_batch(tmp_path):
    train(tmp_path / "two", "--set", "optim.batch_size=4", "--nproc", "2", "--max-steps", "2")
    env = {**os.environ}
    env.pop("WORLD_SIZE", None)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "liquid_stream.cli",
            "train",
            "toy",
            "--out",
            str(tmp_path / "x"),
            "--resume",
            str(tmp_path / "two" / "last.pt"),
            *BASE,
            "--set",
            "optim.batch_size=4",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode != 0
    assert "global batch" in res.stderr
