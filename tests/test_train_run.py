"""Training from Python (training/run.py): ``train(config, out)`` runs what
``liquid-stream train`` runs, and ``train.init`` warm-starts a run from a checkpoint's
weights (fresh optimizer and schedule; refused when the shapes differ; not on resume)."""

from __future__ import annotations

import json

import torch
from click.testing import CliRunner

from liquid_stream.checkpoint import load_checkpoint
from liquid_stream.training.cli import train_cmd
from liquid_stream.training.config import load_config
from liquid_stream.training.run import make_trainer, train

TINY = ["model.d_model=8", "train.device=cpu", "train.progress=false", "train.threads=1"]


def _same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(v, b[k]) for k, v in a.items())


def test_train_from_python(tmp_path):
    out = tmp_path / "run"
    summary = train(load_config("toy", "tiny", [*TINY, "train.max_steps=3"]), out)
    assert summary["step"] == 3 and summary["stopped_by_max_steps"]
    assert json.loads((out / "test_metrics.json").read_text()) == summary["test"]
    assert load_checkpoint(out / "last.pt")["trainer"]["step"] == 3


def test_init_warm_starts_the_weights_only(tmp_path):
    src = tmp_path / "src" / "last.pt"
    train(load_config("toy", "tiny", [*TINY, "train.max_steps=2"]), src.parent)
    cfg = load_config("toy", "tiny", [*TINY, f"train.init={json.dumps(str(src))}"])
    trainer, _ = make_trainer(cfg, tmp_path / "warm")
    assert _same_weights(trainer.model.state_dict(), load_checkpoint(src)["model"])
    assert (trainer.step, trainer.epoch, trainer.batch_in_epoch) == (0, 0, 0)
    assert trainer.optimizer.state_dict()["state"] == {}  # no AdamW moments carried over
    assert trainer.schedule.last_factor == 1.0

    # resuming a warm-started run continues from its own checkpoint, not from train.init
    cfg["train"]["max_steps"] = 2
    train(cfg, tmp_path / "warm")
    last = tmp_path / "warm" / "last.pt"
    resumed, _ = make_trainer(cfg, tmp_path / "warm", resume=last)
    assert resumed.step == 2
    assert _same_weights(resumed.model.state_dict(), load_checkpoint(last)["model"])


def test_init_of_another_shape_is_a_one_line_error(tmp_path):
    src = tmp_path / "src" / "last.pt"
    train(load_config("toy", "tiny", [*TINY, "train.max_steps=1"]), src.parent)
    out = tmp_path / "wide"
    r = CliRunner().invoke(
        train_cmd, ["toy", "--preset", "tiny", "--device", "cpu", "--out", str(out),
                    "--set", "model.d_model=12", "--set", f"train.init={src}"],
    )  # fmt: skip
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"Error: train.init {src}: "), lines
    assert "size mismatch" in lines[0]
    assert not out.exists()  # refused before the run folder is made
