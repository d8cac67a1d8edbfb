"""Click commands ``train`` and ``evaluate`` (added to ``liquid-stream`` by the main CLI).

    liquid-stream train toy --max-steps 5 --out runs/toy
    liquid-stream train speech --preset cpu [--data PATH] [--set optim.lr=3e-3 ...]
    liquid-stream train speech --resume runs/speech/last.pt
    liquid-stream train speech --nproc 2           # data parallel (torchrun), see distributed.py
    liquid-stream evaluate runs/speech/best.pt [--data PATH]

Heavy imports (torch, the trainer) stay inside the functions so ``--help`` is fast.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import click

DEVICE_CHOICE = click.Choice(["auto", "cpu", "cuda"])
# What a task builder raises for bad or missing data (a missing file is an OSError); these
# reach the user as one-line CLI errors, anything else keeps its traceback.
DATA_ERRORS = (RuntimeError, ValueError, OSError)


def _one_line(e: BaseException | str) -> str:
    """The message of ``e`` on one line (YAML errors, for one, span several)."""
    text = str(e) if not isinstance(e, OSError) or not e.strerror else _os_error(e)
    return " ".join(text.split())


def _os_error(e: OSError) -> str:
    """``path: reason`` for an OSError that carries a file name (not ``[Errno 2] ...``)."""
    return f"{e.filename}: {e.strerror}" if e.filename else e.strerror


def _fmt(metrics: dict) -> str:
    parts = []
    for k, v in metrics.items():
        if isinstance(v, float):
            parts.append(f"{k}={v:.4f}" if math.isfinite(v) else f"{k}={v}")
        elif isinstance(v, int | str) or v is None:
            parts.append(f"{k}={v}")
    return " ".join(parts)


@click.command("train")
@click.argument("task")
@click.option("--preset", default=None, help="Config preset (e.g. paper, cpu).")
@click.option(
    "--data",
    "data_root",
    default=None,
    type=click.Path(file_okay=False),
    help="Dataset root (sets data.root); default: the task's built-in data.",
)
@click.option(
    "--out",
    "out_dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Output folder (default runs/<task>[-<preset>]).",
)
@click.option("--device", default=None, type=DEVICE_CHOICE, help="Overrides train.device.")
@click.option(
    "--resume",
    default=None,
    type=click.Path(dir_okay=False),
    help="Continue exactly from a last.pt / best.pt written by the trainer.",
)
@click.option(
    "--max-steps",
    default=None,
    type=click.IntRange(1),
    help="Stop after K optimizer steps (sets train.max_steps).",
)
@click.option(
    "--target",
    default=None,
    help="Regression target of a vital-sign task (bidmc: hr, rr or spo2; sets data.target).",
)
@click.option(
    "--grad-accum",
    default=None,
    type=click.IntRange(1),
    help="Micro-batches per optimizer step (sets optim.grad_accum).",
)
@click.option(
    "--nproc",
    default=1,
    type=click.IntRange(1),
    show_default=True,
    help="Data-parallel processes on this machine (relaunches under torchrun; "
    "global batch = batch_size × nproc × grad_accum).",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a config field, e.g. --set optim.lr=1e-3 (repeatable).",
)
def train_cmd(task, preset, data_root, out_dir, device, resume, max_steps, target, grad_accum,
              nproc, overrides):  # fmt: skip
    """Train TASK (a name from training/configs/, or a .yaml path) and print the final
    validation and test metrics."""  # fmt: skip
    import os
    import sys

    from .config import ConfigError, dump_config, load_config, resume_config

    extra = list(overrides)
    if grad_accum is not None:
        extra.append(f"optim.grad_accum={grad_accum}")
    if data_root is not None:
        extra.append(f"data.root={json.dumps(str(data_root))}")
    if device is not None:
        extra.append(f"train.device={device}")
    if max_steps is not None:
        extra.append(f"train.max_steps={max_steps}")
    if target is not None:
        extra.append(f"data.target={json.dumps(target)}")
    try:
        cfg = load_config(task, preset, extra)
        if resume:  # continue the stored run: its config, plus this command's overrides
            from liquid_stream.checkpoint import CheckpointError, load_checkpoint

            try:
                saved = load_checkpoint(resume).get("config")
            except CheckpointError as e:
                raise click.ClickException(str(e)) from e
            if saved:
                cfg = resume_config(saved, task, extra)
    except ConfigError as e:  # every field is checked before anything is built or written
        raise click.ClickException(f"config: {_one_line(e)}") from e
    if nproc > 1 and int(os.environ.get("WORLD_SIZE", "1")) == 1:
        from .distributed import launch

        argv = sys.argv[1:]
        i = next(k for k, a in enumerate(argv) if a == "--nproc" or a.startswith("--nproc="))
        del argv[i : i + (1 if "=" in argv[i] else 2)]
        raise SystemExit(launch(nproc, argv))
    name = cfg["task"] + (f"-{cfg['data']['target']}" if "target" in cfg["data"] else "")
    out = Path(out_dir or Path("runs") / (name + (f"-{preset}" if preset else "")))
    main = int(os.environ.get("RANK", "0")) == 0  # data parallel: rank 0 writes and prints
    echo = click.echo if main else (lambda *a, **k: None)

    from liquid_stream.checkpoint import CheckpointError
    from liquid_stream.model import LiquidS4Model

    from .config import OptimConfig, TrainConfig
    from .rng import seed_everything
    from .tasks import build_task
    from .trainer import NonFiniteLossError, Trainer

    seed_everything(cfg["train"]["seed"])
    try:  # the data, every split checked non-empty, before the run folder is made
        train_set, val_set, test_set, meta, loss = build_task(cfg)
    except DATA_ERRORS as e:
        raise click.ClickException(_one_line(e)) from e
    try:
        model = LiquidS4Model(
            d_input=meta["d_input"], d_output=meta["d_output"], **model_config(cfg, meta),
        )  # fmt: skip
    except (ValueError, RuntimeError) as e:  # e.g. output_scale of the wrong length
        raise click.ClickException(f"model: {_one_line(e)}") from e
    init = cfg["train"].get("init")
    if init and not resume:  # warm start: the weights only; optimizer and schedule start afresh
        from liquid_stream.checkpoint import load_checkpoint

        try:
            model.load_state_dict(load_checkpoint(init)["model"])
        except (CheckpointError, RuntimeError, KeyError) as e:
            raise click.ClickException(f"train.init {init}: {_one_line(e)}") from e
    if main:
        out.mkdir(parents=True, exist_ok=True)
        dump_config(cfg, out / "config.yaml")
    n_params = sum(p.numel() for p in model.parameters())
    optim_cfg, train_cfg = OptimConfig(**cfg["optim"]), TrainConfig(**cfg["train"])
    trainer = Trainer(model, train_set, val_set, optim_cfg, train_cfg, out, meta, loss,
                      config=cfg)  # fmt: skip
    world = trainer.dist.world_size
    echo(
        f"task {cfg['task']}" + (f" (preset {preset})" if preset else "")
        + (f" on {meta['source']}" if "source" in meta else "")
        + f": {n_params} parameters, {len(train_set)} train / "
        f"{len(val_set) if val_set is not None else 0} val examples, device "
        f"{trainer.device}, {trainer.steps_per_epoch} steps/epoch"
        + (f", {world} processes × batch {trainer.batch_size}" if world > 1 else "")
        + f" -> {out}"
    )  # fmt: skip
    if resume:
        try:
            trainer.resume(resume)
        except CheckpointError as e:
            raise click.ClickException(str(e)) from e
        echo(f"resumed from {resume} at epoch {trainer.epoch}, step {trainer.step}")
    try:
        summary = trainer.fit()
    except NonFiniteLossError as e:
        raise click.ClickException(str(e)) from e
    finally:
        if world > 1:
            import torch.distributed as dist

            dist.destroy_process_group()
    if not main:
        return
    click.echo(f"final: {_fmt(summary)}")
    best = out / "best.pt"
    if test_set is not None and len(test_set) and best.is_file():
        from liquid_stream.checkpoint import load_checkpoint

        trainer.model.load_state_dict(load_checkpoint(best)["model"])
        test = trainer.evaluate(test_set)
        click.echo(f"test (best.pt): {_fmt(test)}")
        (out / "test_metrics.json").write_text(json.dumps(test, indent=1))
    click.echo(f"wrote {out}/metrics.csv, curves.png, last.pt, best.pt")


def model_config(cfg: dict, meta: dict) -> dict:
    """The model's arguments: ``cfg["model"]`` completed by what the data decides (the
    output affine of regression targets, the log-mel front end's band statistics)."""
    m = dict(cfg["model"])
    m.update({k: v for k, v in output_affine(meta).items() if k not in m})
    if "frontend_stats" in meta and m.get("frontend"):
        m["frontend"] = {**m["frontend"], **meta["frontend_stats"]}
    return m


def output_affine(meta: dict) -> dict:
    """Regression tasks: the model's output affine from the train targets' mean / std, so
    the network learns standardised targets while every output (forward, streaming, ONNX)
    is in physical units."""
    if "target_mean" in meta and "target_std" in meta:
        return {
            "output_shift": float(meta["target_mean"]),
            "output_scale": float(meta["target_std"]),
        }
    return {}


@click.command("evaluate")
@click.argument("checkpoints", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--data",
    "data_root",
    default=None,
    type=click.Path(file_okay=False),
    help="Dataset root (default: the one recorded in the checkpoint's config).",
)
@click.option("--split", default="test", type=click.Choice(["val", "test"]), show_default=True)
@click.option("--device", default="auto", type=DEVICE_CHOICE, show_default=True)
@click.option("--batch-size", default=32, type=click.IntRange(1), show_default=True)
@click.option(
    "--out",
    "out_dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Where to write the PNGs (default: next to each checkpoint).",
)
@click.option(
    "--baseline",
    is_flag=True,
    help="Vital signs: also run NeuroKit2's peak-detection HR / RR on the same "
    "windows and print its RMSE next to the model's.",
)
def evaluate_cmd(checkpoints, data_root, split, device, batch_size, out_dir, baseline):
    """Evaluate CHECKPOINTS on their task's SPLIT. Classifiers: accuracy, per-class
    accuracy and a confusion-matrix PNG (speech: at 16 kHz and zero-shot at 8 kHz with Δ
    doubled). Vital signs (bidmc): RMSE / MAE in physical units, a scatter + Bland–Altman
    PNG, one table row per checkpoint (e.g. one per split protocol) and, with
    --baseline, NeuroKit2's classical estimate on the same windows."""
    rows = []
    for checkpoint in checkpoints:
        rows += _evaluate_one(checkpoint, data_root, split, device, batch_size, out_dir,
                              baseline) or []  # fmt: skip
    if rows:
        from .evaluate_vitals import format_table

        click.echo(format_table(rows))


def _evaluate_one(checkpoint, data_root, split, device, batch_size, out_dir, baseline):
    import copy

    from liquid_stream.checkpoint import CheckpointError, load_checkpoint, model_from_checkpoint

    from .metrics import evaluate_model
    from .rng import resolve_device
    from .tasks import build_task

    try:
        ckpt = load_checkpoint(checkpoint)
        model, meta = model_from_checkpoint(ckpt)
    except CheckpointError as e:
        raise click.ClickException(str(e)) from e
    cfg = copy.deepcopy(ckpt.get("config") or {})
    if not cfg.get("task"):
        raise click.ClickException(f"{checkpoint} records no task config; cannot rebuild data")
    if data_root is not None:
        cfg["data"]["root"] = str(data_root)
    elif cfg["task"] == "speech" and not cfg["data"].get("root") and meta.get("data_root"):
        cfg["data"]["root"] = meta["data_root"]
    loss = (ckpt.get("trainer") or {}).get("loss", "ce")
    stats = (meta.get("input_mean"), meta.get("input_std"))
    stats = stats if None not in stats else None
    dev = resolve_device(device)
    model.to(dev)
    out = Path(out_dir) if out_dir else Path(checkpoint).parent
    out.mkdir(parents=True, exist_ok=True)
    if cfg["task"] == "bidmc":
        from .evaluate_vitals import evaluate_vitals

        try:
            return evaluate_vitals(model, meta, cfg, stats, split, dev, batch_size, out,
                                   baseline, name=Path(checkpoint).parent.name)  # fmt: skip
        except DATA_ERRORS as e:
            raise click.ClickException(_one_line(e)) from e
    rates = [(1, meta.get("sample_rate"))]
    if cfg["task"] == "speech":
        rates.append((2, (meta.get("sample_rate") or 16000) // 2))
    labels = list(meta.get("labels") or [])
    for rate, sr in rates:
        try:
            if rate == 1:
                sets = build_task(cfg, stats=stats)
            else:
                from .tasks import TASKS

                sets = TASKS[cfg["task"]](cfg, stats=stats, rate=rate)
        except DATA_ERRORS as e:
            raise click.ClickException(_one_line(e)) from e
        ds = sets[2] if split == "test" else sets[1]
        n_classes = None if loss == "mse" else int(meta.get("d_output") or model.d_output)
        res = evaluate_model(model, ds, loss, dev, batch_size, rate=float(rate),
                             n_classes=n_classes)  # fmt: skip
        tag = f"{sr} Hz" if sr else f"rate {rate}"
        if loss == "mse":
            click.echo(f"{split} @ {tag}: rmse {res['rmse']:.4f}, mae {res['mae']:.4f}")
            continue
        click.echo(f"{split} @ {tag}: accuracy {100 * res['acc']:.2f}% ({len(ds)} examples)")
        names = labels if len(labels) == n_classes else [str(i) for i in range(n_classes)]
        for name, acc in zip(names, res["per_class_acc"], strict=True):
            shown = f"{100 * acc:6.2f}%" if acc == acc else "   n/a"
            click.echo(f"  {name:>12s}: {shown}")
        png = out / f"confusion_{split}_{sr or rate}.png"
        plot_confusion(res["confusion"], names, png, f"{split} @ {tag}: {100 * res['acc']:.2f}%")
        click.echo(f"  confusion matrix: {png}")


def plot_confusion(conf, names, path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    conf = np.asarray(conf, np.float64)
    norm = conf / np.maximum(conf.sum(1, keepdims=True), 1)
    n = len(names)
    size = max(4.0, 0.28 * n + 2)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    im = ax.imshow(norm, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(n), names, rotation=90, fontsize=7 if n > 12 else 9)
    ax.set_yticks(range(n), names, fontsize=7 if n > 12 else 9)
    ax.set(xlabel="predicted", ylabel="true", title=title)
    fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
