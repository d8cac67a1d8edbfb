"""Training from Python (training/run.py): ``train(config, out)`` runs what
``liquid-stream train`` runs, and ``train.init`` warm-starts a run from a checkpoint's
weights (fresh optimizer and schedule; refused when the shapes differ; not on resume)."""

from __future__ import annotations

import json

import torch
from click.testing import CliRunner

from liquid_stream.nn.checkpoint import load_checkpoint
from liquid_stream.training.cli import train_cmd
from liquid_stream.training.config import load_config
from liquid_stream.training.run import inherit_frontend_stats, make_trainer, train

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
        train_cmd,
        [
            "toy",
            "--preset",
            "tiny",
            "--device",
            "cpu",
            "--out",
            str(out),
            "--set",
            "model.d_model=12",
            "--set",
            f"train.init={src}",
        ],
    )
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"Error: train.init {src}: "), lines
    assert "size mismatch" in lines[0]
    assert not out.exists()  # refused before the run folder is made


def test_init_keeps_the_data_constants_of_its_checkpoint(tmp_path):
    """Warm-started on other data, a run keeps the input standardisation its weights were
    trained with (recomputing it from the new data would shift every input), on resume too."""
    src = tmp_path / "src" / "last.pt"
    train(load_config("toy", "tiny", [*TINY, "train.max_steps=1"]), src.parent)
    saved = load_checkpoint(src)["meta"]
    other = [*TINY, "data.seed=99", "data.noise=0.9", f"train.init={json.dumps(str(src))}"]
    cold, _ = make_trainer(load_config("toy", "tiny", other[:-1]), tmp_path / "cold")
    assert cold.meta["input_mean"] != saved["input_mean"]  # the new data's own statistics
    cfg = load_config("toy", "tiny", [*other, "train.max_steps=1"])
    warm, _ = make_trainer(cfg, tmp_path / "warm")
    assert warm.meta["input_mean"] == saved["input_mean"]
    assert warm.meta["input_std"] == saved["input_std"]
    train(cfg, tmp_path / "warm")
    resumed, _ = make_trainer(cfg, tmp_path / "warm", resume=tmp_path / "warm" / "last.pt")
    assert resumed.meta["input_mean"] == saved["input_mean"]


def test_init_keeps_the_log_mel_band_statistics():
    stats = {"mean": [1.0, 2.0], "std": [3.0, 4.0]}
    cfg = {"model": {"frontend": {"kind": "logmel", "n_mels": 2}, "d_model": 8}}
    got = inherit_frontend_stats(cfg, {"frontend_stats": stats})
    assert got["model"]["frontend"] == {"kind": "logmel", "n_mels": 2, **stats}
    assert cfg["model"]["frontend"] == {"kind": "logmel", "n_mels": 2}  # not mutated
    given = {"model": {"frontend": {"kind": "logmel", "mean": [0.0, 0.0], "std": [1.0, 1.0]}}}
    assert inherit_frontend_stats(given, {"frontend_stats": stats}) == given  # explicit wins
    assert inherit_frontend_stats({"model": {}}, {"frontend_stats": stats}) == {"model": {}}
