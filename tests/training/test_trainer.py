"""The trainer (training/): loss goes down, exact resume, checkpoints, NaN stop, configs, CLI."""

from __future__ import annotations

import csv
import dataclasses

import pytest
import torch
from click.testing import CliRunner

from liquid_stream.nn.checkpoint import CheckpointError, load_checkpoint
from liquid_stream.nn.model import LiquidS4Model
from liquid_stream.training.cli import evaluate_cmd, train_cmd
from liquid_stream.training.config import ConfigError, OptimConfig, TrainConfig, load_config
from liquid_stream.training.rng import seed_everything
from liquid_stream.training.tasks import build_task
from liquid_stream.training.trainer import NonFiniteLossError, Trainer

SMALL = [
    "data.n_train=16",
    "data.n_val=8",
    "data.n_test=8",
    "data.length=192",
    "optim.batch_size=4",
    "optim.epochs=3",
    "optim.warmup_steps=2",
    "model.d_model=8",
    "model.dropout=0.1",
    "train.device=cpu",
    "train.progress=false",
]


def make(tmp, overrides=(), seed=None):
    cfg = load_config("toy", None, SMALL + list(overrides))
    seed_everything(cfg["train"]["seed"] if seed is None else seed)
    train, val, test, meta, loss = build_task(cfg)
    model = LiquidS4Model(d_input=meta["d_input"], d_output=meta["d_output"], **cfg["model"])
    optim, run = OptimConfig(**cfg["optim"]), TrainConfig(**cfg["train"])
    return Trainer(model, train, val, optim, run, tmp, meta, loss, config=cfg)


def test_training_reduces_loss(tmp_path):
    tr = make(
        tmp_path,
        [
            "optim.epochs=3",
            "model.d_model=16",
            "optim.lr=0.02",
            "data.n_train=32",
            "data.length=512",
            "model.dropout=0",
        ],
    )
    summary = tr.fit()
    losses = tr.step_losses
    assert len(losses) == 24 and summary["step"] == 24
    assert sum(losses[-4:]) / 4 < 0.85 * sum(losses[:4]) / 4, losses
    assert summary["train_acc"] > 0.5


@pytest.mark.parametrize(
    "accum,k,ema,amp", [(1, 6, 0, False), (2, 4, 0, False), (1, 5, 0.9, False), (1, 4, 0, True)]
)
@pytest.mark.slow
def test_resume_is_bit_exact(tmp_path, accum, k, ema, amp):
    over = [f"optim.grad_accum={accum}", f"optim.ema={ema}", f"train.amp={str(amp).lower()}"]
    full = make(tmp_path / "full", over)
    full.fit()
    # Interrupted run: stops after k steps (mid-epoch for accum=1), then a fresh process
    # (different global seed, freshly initialised model) resumes from last.pt.
    first = make(tmp_path / "cut", over + [f"train.max_steps={k}"])
    first.fit()
    assert first.step == k
    second = make(tmp_path / "cut", over, seed=12345)
    second.resume(tmp_path / "cut" / "last.pt")
    assert second.step == k
    second.fit()
    assert first.step_losses + second.step_losses == full.step_losses
    for (name, a), b in zip(
        full.model.state_dict().items(), second.model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name
    if ema:  # the weight average resumes too, and so do best.pt (the average) and its metrics
        assert all(torch.equal(v, second.ema[n]) for n, v in full.ema.items())
        b_full, b_cut = (load_checkpoint(tmp_path / d / "best.pt") for d in ("full", "cut"))
        drop = ("time_s",)
        assert {k: v for k, v in b_full["metrics"].items() if k not in drop} == {
            k: v for k, v in b_cut["metrics"].items() if k not in drop
        }
        assert all(torch.equal(v, b_cut["model"][n]) for n, v in b_full["model"].items())
    with open(tmp_path / "full" / "steps.csv") as f1, open(tmp_path / "cut" / "steps.csv") as f2:
        assert [r["loss"] for r in csv.DictReader(f1)] == [r["loss"] for r in csv.DictReader(f2)]


def test_cpu_amp_autocasts_to_bf16_and_refuses_fp16(tmp_path):
    """train.amp on the CPU: the forward's matmuls run in bf16 (the encoder's output is bf16
    inside the trainer's autocast, float32 outside), training still lowers the loss; fp16
    on the CPU is a clear error."""
    tr = make(
        tmp_path / "bf",
        [
            "train.amp=true",
            "optim.epochs=3",
            "model.d_model=16",
            "optim.lr=0.02",
            "data.n_train=32",
            "data.length=512",
            "model.dropout=0",
        ],
    )
    assert tr.amp_dtype == torch.bfloat16 and tr.scaler is None
    seen = []
    hook = tr.model.encoder.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    x = torch.randn(2, 64, tr.model.encoder.in_features)
    with tr.autocast():
        tr.model(x)
    tr.model(x)
    hook.remove()
    assert seen == [torch.bfloat16, torch.float32]
    tr.fit()
    losses = tr.step_losses
    assert sum(losses[-4:]) / 4 < 0.85 * sum(losses[:4]) / 4, losses
    with pytest.raises(ValueError, match="bf16 only"):
        make(tmp_path / "fp16", ["train.amp=true", "train.amp_dtype=fp16"])


def test_weight_average_is_the_literal_recurrence(tmp_path):
    """optim.ema: w̄_t = d_t w̄_{t-1} + (1 - d_t) w_t, d_t = min(d, (1 + t) / (10 + t)), from
    w̄_0 = w_0, recomputed in float64 from the raw weights after every step; validation and
    best.pt use w̄, last.pt keeps the raw weights and w̄, and a lost best.pt comes back as
    w̄ from last.pt."""
    d = 0.8
    tr = make(tmp_path, ["optim.epochs=2", f"optim.ema={d}", "train.eval_every=1"])
    raw = [{k: v.double().clone() for k, v in tr.model.state_dict().items()}]
    update = tr._update_ema

    def record():
        raw.append({k: v.double().clone() for k, v in tr.model.state_dict().items()})
        update()

    tr._update_ema = record
    tr.fit()
    assert tr.step == len(raw) - 1 == 8
    avgs = [dict(raw[0])]
    for t in range(1, len(raw)):
        dt = min(d, (1 + t) / (10 + t))
        avgs.append({k: dt * avgs[-1][k] + (1 - dt) * raw[t][k] for k in raw[t]})
    avg = avgs[-1]
    floating = [k for k, v in tr.ema.items() if v.is_floating_point()]
    assert (
        floating and max((tr.ema[k].double() - avg[k]).abs().max().item() for k in floating) < 1e-6
    )
    # the average is not the weights (else this test could not tell them apart)
    assert max((avg[k] - raw[-1][k]).abs().max().item() for k in floating) > 1e-3
    last = load_checkpoint(tmp_path / "last.pt")
    assert all(torch.equal(last["model"][k], v) for k, v in tr.model.state_dict().items())
    assert all(torch.equal(last["trainer"]["ema"][k], v) for k, v in tr.ema.items())
    best = load_checkpoint(tmp_path / "best.pt")
    at = avgs[best["trainer"]["step"]]  # best.pt is the average at its step
    assert max((best["model"][k].double() - at[k]).abs().max().item() for k in floating) < 1e-6
    if best["trainer"]["step"] == tr.step:  # and the validation row is the average's
        with tr.averaged():
            again = tr.evaluate(tr.val_set)
        assert best["metrics"]["val_loss"] == pytest.approx(again["loss"], rel=1e-6)
    assert all(torch.equal(last["model"][k], v) for k, v in tr.model.state_dict().items())
    (tmp_path / "best.pt").unlink()
    resumed = make(tmp_path, ["optim.epochs=2", f"optim.ema={d}"])
    resumed.resume(tmp_path / "last.pt")
    back = load_checkpoint(tmp_path / "best.pt")
    assert all(torch.equal(back["model"][k], v) for k, v in best["model"].items())
    with pytest.raises(CheckpointError, match="optim.ema=on.*off"):
        make(tmp_path / "plain").resume(tmp_path / "last.pt")


def test_checkpoints_weights_only_and_corrupt(tmp_path):
    tr = make(tmp_path, ["optim.epochs=1"])
    tr.fit()
    for name in ("last.pt", "best.pt"):
        obj = torch.load(tmp_path / name, map_location="cpu", weights_only=True)
        assert obj["meta"]["labels"] == ["silence", "440 Hz", "880 Hz"]
        assert {"input_mean", "input_std", "sample_rate", "task"} <= set(obj["meta"])
        st = obj["trainer"]
        assert {"optimizer", "scheduler", "rng", "sampler", "epoch", "step", "best"} <= set(st)
        assert obj["config"]["model"]["d_model"] == 8
    data = (tmp_path / "last.pt").read_bytes()
    bad = tmp_path / "bad.pt"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt|truncated"):
        load_checkpoint(bad)
    with pytest.raises(CheckpointError):
        make(tmp_path / "other").resume(bad)
    bad.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError):
        make(tmp_path / "other").resume(bad)


def test_nan_loss_stops_with_clear_message(tmp_path):
    tr = make(tmp_path, ["optim.epochs=1"])
    tr.fit()  # 4 good steps, last.pt at step 4
    tr.optim_cfg = dataclasses.replace(tr.optim_cfg, epochs=2)
    with torch.no_grad():
        tr.model.encoder.weight[0, 0] = float("nan")
    with pytest.raises(NonFiniteLossError, match=r"non-finite .*nan.* at step 5 \(epoch 2") as e:
        tr.fit()
    assert "last.pt" in str(e.value)
    kept = load_checkpoint(tmp_path / "last.pt")
    assert kept["trainer"]["step"] == 4
    assert all(torch.isfinite(v).all() for v in kept["model"].values() if v.is_floating_point())


def test_config_presets_overrides_and_errors():
    cfg = load_config("toy", "tiny", ["optim.lr=1e-3", "model.liquid=null", "optim.milestones=[2]"])
    assert cfg["data"]["n_train"] == 16 and cfg["optim"]["epochs"] == 2  # preset
    assert cfg["optim"]["lr"] == 1e-3 and cfg["model"]["liquid"] is None  # --set
    assert cfg["optim"]["milestones"] == [2] and cfg["optim"]["grad_clip"] == 1.0  # file
    with pytest.raises(ConfigError, match=r"optim\.lrr.*did you mean lr"):
        load_config("toy", None, ["optim.lrr=1"])
    with pytest.raises(ConfigError, match=r"model\.d_modle"):
        load_config("toy", None, ["model.d_modle=4"])
    with pytest.raises(ConfigError, match="unknown preset"):
        load_config("toy", "nope")
    with pytest.raises(ConfigError, match="schedule"):
        load_config("toy", None, ["optim.schedule=linear"])
    sp = load_config("speech", "paper")
    assert (sp["model"]["n_layers"], sp["model"]["d_model"], sp["model"]["d_state"]) == (6, 128, 7)
    assert sp["model"]["bidirectional"] is False and sp["model"]["liquid"] == "pb"
    assert (sp["optim"]["lr"], sp["optim"]["batch_size"], sp["optim"]["epochs"]) == (0.008, 10, 50)
    cpu = load_config("speech", "cpu")
    assert cpu["model"]["d_model"] <= 64 and cpu["data"]["max_train_per_class"]


def test_cli_train_and_evaluate(tmp_path):
    out = tmp_path / "run"
    r = CliRunner().invoke(
        train_cmd,
        [
            "toy",
            "--preset",
            "tiny",
            "--max-steps",
            "5",
            "--out",
            str(out),
            "--device",
            "cpu",
            "--set",
            "model.d_model=8",
        ],
    )
    assert r.exit_code == 0, r.output + repr(r.exception)
    assert "final:" in r.output and "test (best.pt)" in r.output
    for name in ("metrics.csv", "curves.png", "best.pt", "last.pt", "steps.csv", "config.yaml"):
        assert (out / name).stat().st_size > 0, name
    assert load_checkpoint(out / "last.pt")["trainer"]["step"] == 5
    r = CliRunner().invoke(evaluate_cmd, [str(out / "best.pt"), "--device", "cpu"])
    assert r.exit_code == 0, r.output + repr(r.exception)
    assert "accuracy" in r.output and "440 Hz" in r.output
    assert (out / "confusion_test_8000.png").stat().st_size > 0
    r = CliRunner().invoke(train_cmd, ["toy", "--set", "optim.bogus=1", "--out", str(out)])
    assert r.exit_code != 0 and "optim.bogus" in r.output
    fp16 = ["--set", "train.amp=true", "--set", "train.amp_dtype=fp16"]
    r = CliRunner().invoke(train_cmd, ["toy", "--device", "cpu", *fp16, "--out", str(out)])
    assert r.exit_code == 1 and "Error: train.amp on the CPU autocasts to bf16 only" in r.output
    assert "Traceback" not in r.output


@pytest.mark.slow
def test_cli_speech_cpu_preset_end_to_end(tmp_path):
    """`train speech --preset cpu --max-steps K` on a small v0.02-layout root, then
    `evaluate` at 16 kHz and zero-shot 8 kHz."""
    from fixtures_speech import tiny_root

    root = tiny_root(tmp_path / "sc")
    out = tmp_path / "run"
    r = CliRunner().invoke(
        train_cmd,
        [
            "speech",
            "--preset",
            "cpu",
            "--data",
            str(root),
            "--max-steps",
            "2",
            "--out",
            str(out),
            "--set",
            "data.subset=sc10",
            "--set",
            "model.d_model=8",
            "--set",
            "model.n_layers=1",
            "--set",
            "optim.batch_size=4",
        ],
    )
    assert r.exit_code == 0, r.output + repr(r.exception)
    ckpt = load_checkpoint(out / "best.pt")
    meta = ckpt["meta"]
    assert meta["labels"][:3] == ["yes", "no", "up"] and meta["sample_rate"] == 16000
    assert meta["input_std"][0] > 0 and ckpt["trainer"]["step"] == 2
    r = CliRunner().invoke(evaluate_cmd, [str(out / "best.pt"), "--device", "cpu"])
    assert r.exit_code == 0, r.output + repr(r.exception)
    assert "16000 Hz" in r.output and "8000 Hz" in r.output
    for sr in (16000, 8000):
        assert (out / f"confusion_test_{sr}.png").stat().st_size > 0


def test_cli_resume_continues_the_stored_run_config(tmp_path):
    """--resume takes the checkpoint's config (model size, data, …); only this command's
    overrides (here max_steps) apply — the task YAML is not re-read into the run."""
    out = tmp_path / "run"
    args = ["toy", "--preset", "tiny", "--set", "model.d_model=12", "--out", str(out)]
    r = CliRunner().invoke(train_cmd, [*args, "--max-steps", "3"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(
        train_cmd, ["toy", "--resume", str(out / "last.pt"), "--max-steps", "6", "--out", str(out)]
    )
    assert r.exit_code == 0, r.output
    assert "resumed from" in r.output and "step=6" in r.output
    r = CliRunner().invoke(
        train_cmd, ["speech", "--resume", str(out / "last.pt"), "--out", str(out)]
    )
    assert r.exit_code != 0 and "not 'speech'" in r.output


def test_class_weights_and_balanced_accuracy():
    """ce_per_step with class weights equals the weighted mean of −log p; the balanced
    accuracy is the mean per-class recall (a constant 'silence' answer scores 1/C)."""
    import numpy as np
    from torch.utils.data import TensorDataset

    from liquid_stream.training.metrics import compute_loss, evaluate_model

    torch.manual_seed(0)
    logits = torch.randn(2, 7, 3, dtype=torch.float64)
    y = torch.randint(0, 3, (2, 7))
    w = torch.tensor([1.0, 2.0, 0.1])
    loss, _ = compute_loss(logits, y, "ce_per_step", class_weight=w)
    nll = -torch.log_softmax(logits.float(), -1).reshape(-1, 3)[torch.arange(14), y.reshape(-1)]
    ww = w[y.reshape(-1)]
    assert loss.item() == pytest.approx(((nll * ww).sum() / ww.sum()).item(), rel=1e-6)

    class Constant(torch.nn.Module):  # always answers class 0 ("silence")
        decoder = "window"

        def forward(self, x, rate=1.0):
            out = torch.zeros(*x.shape[:2], 3)
            out[..., 0] = 1.0
            return out

    yy = torch.tensor([[0] * 8 + [1] * 1 + [2] * 1])
    res = evaluate_model(
        Constant(), TensorDataset(torch.zeros(1, 10, 1), yy), "ce_per_step", n_classes=3
    )
    assert res["acc"] == pytest.approx(0.8) and res["bacc"] == pytest.approx(1 / 3)
    assert np.isclose(res["per_class_acc"], [1.0, 0.0, 0.0]).all()
