"""Click commands ``train`` and ``evaluate`` (added to ``liquid-stream`` by the main CLI).

    liquid-stream train toy --max-steps 5 --out runs/toy
    liquid-stream train speech --preset cpu [--data PATH] [--set optim.lr=3e-3 ...]
    liquid-stream train speech --resume runs/speech/last.pt
    liquid-stream train speech --nproc 2           # data parallel (torchrun), see distributed.py
    liquid-stream evaluate runs/speech/best.pt [--data PATH]

``train`` resolves the config and calls :func:`.run.train` (the same run from Python),
turning the errors a user can fix into one-line messages. Heavy imports (torch, the
trainer) stay inside the functions so ``--help`` is fast.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

DEVICE_CHOICE = click.Choice(["auto", "cpu", "cuda"])


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
def train_cmd(
    task,
    preset,
    data_root,
    out_dir,
    device,
    resume,
    max_steps,
    target,
    grad_accum,
    nproc,
    overrides,
):
    """Train TASK (a name from training/configs/, or a .yaml path) and print the final
    validation and test metrics."""
    import os
    import sys

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
    cfg = _run_config(task, preset, extra, resume)
    if nproc > 1 and int(os.environ.get("WORLD_SIZE", "1")) == 1:
        from .distributed import launch

        argv = sys.argv[1:]
        i = next(k for k, a in enumerate(argv) if a == "--nproc" or a.startswith("--nproc="))
        del argv[i : i + (1 if "=" in argv[i] else 2)]
        raise SystemExit(launch(nproc, argv))
    name = cfg["task"] + (f"-{cfg['data']['target']}" if "target" in cfg["data"] else "")
    out = Path(out_dir or Path("runs") / (name + (f"-{preset}" if preset else "")))

    from liquid_stream.nn.checkpoint import CheckpointError

    from .run import RunError, train
    from .trainer import NonFiniteLossError

    try:
        train(cfg, out, resume)
    except (RunError, CheckpointError, NonFiniteLossError) as e:
        raise click.ClickException(str(e)) from e


def _run_config(task: str, preset: str | None, overrides: list[str], resume) -> dict:
    """The config of the run: the task's (preset, overrides), or with ``resume`` the stored
    run's plus this command's overrides. Every field is checked before anything is built
    or written."""
    from liquid_stream.nn.checkpoint import CheckpointError, load_checkpoint

    from .config import ConfigError, load_config, resume_config
    from .run import one_line

    try:
        cfg = load_config(task, preset, overrides)
        if resume:  # continue the stored run: its config, plus this command's overrides
            try:
                saved = load_checkpoint(resume).get("config")
            except CheckpointError as e:
                raise click.ClickException(str(e)) from e
            if saved:
                cfg = resume_config(saved, task, overrides)
    except ConfigError as e:
        raise click.ClickException(f"config: {one_line(e)}") from e
    return cfg


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
@click.option(
    "--mean",
    is_flag=True,
    help="Vital signs: score the mean of the CHECKPOINTS' estimates as one model (the "
    "ensemble that `export A.pt B.pt` writes); they must hold out the same records. "
    "Needs --out.",
)
@click.option(
    "--weights",
    default=None,
    metavar="W0,W1,...",
    help="With --mean: the members' weights (one positive number per checkpoint, divided "
    "by their sum), as `export --weights` writes them into the graph.",
)
def evaluate_cmd(
    checkpoints, data_root, split, device, batch_size, out_dir, baseline, mean, weights
):
    """Evaluate CHECKPOINTS on their task's SPLIT. Classifiers: accuracy, per-class
    accuracy and a confusion-matrix PNG (speech: at 16 kHz and zero-shot at 8 kHz with Δ
    doubled). Vital signs (bidmc): RMSE / MAE in physical units, a scatter + Bland–Altman
    PNG, one table row per checkpoint (e.g. one per split protocol) and, with
    --baseline, NeuroKit2's classical estimate on the same windows; with --mean one row
    for the members' mean estimate (--weights: their weighted mean)."""
    rows = []
    if weights is not None and not mean:
        raise click.ClickException("--weights weigh the members of --mean")
    if mean:
        rows = _evaluate_mean(
            checkpoints, data_root, split, device, batch_size, out_dir, baseline, weights
        )
    else:
        for checkpoint in checkpoints:
            rows += (
                _evaluate_one(checkpoint, data_root, split, device, batch_size, out_dir, baseline)
                or []
            )
    if rows:
        from .evaluate_vitals import format_table

        click.echo(format_table(rows))


def _load_for_evaluation(checkpoint, data_root):
    """A checkpoint, read for `evaluate`: ``(checkpoint dict, model, meta, config, stats)``,
    the config's data root replaced by ``data_root`` when given (for a speech model without
    one, the root it was trained on), ``stats`` the input statistics or None."""
    import copy

    from liquid_stream.nn.checkpoint import CheckpointError, load_checkpoint, model_from_checkpoint

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
    stats = (meta.get("input_mean"), meta.get("input_std"))
    return ckpt, model, meta, cfg, (stats if None not in stats else None)


def _evaluate_mean(
    checkpoints, data_root, split, device, batch_size, out_dir, baseline, weights=None
):
    """``evaluate --mean``: the bidmc checkpoints' mean (or ``weights``-weighted mean)
    estimate scored as one model, on the data of the first (the members must list the same
    ``split`` records and input statistics, else a one-line error)."""
    from liquid_stream.runtime.meta import SAME_ESTIMATE, MetaError, ensemble_weights

    from .evaluate_vitals import MeanOf, evaluate_vitals
    from .rng import resolve_device
    from .run import DATA_ERRORS, one_line

    if len(checkpoints) < 2 or out_dir is None:
        raise click.ClickException("--mean needs two or more checkpoints and --out")
    try:
        weights = ensemble_weights(weights, len(checkpoints))
    except MetaError as e:
        raise click.ClickException(str(e)) from e
    loaded = [_load_for_evaluation(c, data_root) for c in checkpoints]
    _, _, meta, cfg, stats = loaded[0]
    for c, (_, _, m, member_cfg, _) in zip(checkpoints, loaded, strict=True):
        if member_cfg["task"] != "bidmc":
            raise click.ClickException(
                f"--mean averages vital-sign estimators; {c} is {member_cfg['task']!r}"
            )
        held = (m.get("records") or {}).get(split)
        if held != (meta.get("records") or {}).get(split):
            raise click.ClickException(
                f"{c} holds out other {split} records than {checkpoints[0]}: their mean has "
                "no common held-out set (train them with one data.split_seed)"
            )
        for key in (*SAME_ESTIMATE, "input_mean", "input_std"):
            if m.get(key) != meta.get(key):
                raise click.ClickException(
                    f"{c} differs from {checkpoints[0]} in {key!r}: "
                    f"{m.get(key)!r} vs {meta.get(key)!r}"
                )
    dev = resolve_device(device)
    model = MeanOf([m for _, m, _, _, _ in loaded], weights).to(dev)
    out = Path(out_dir)
    name = f"{'weighted ' if weights else ''}mean of {len(loaded)}"
    with _out_dir(out):
        try:
            return evaluate_vitals(
                model, meta, cfg, stats, split, dev, batch_size, out, baseline, name=name
            )
        except DATA_ERRORS as e:
            raise click.ClickException(one_line(e)) from e


@contextmanager
def _out_dir(out: Path) -> Iterator[Path]:
    """Create the output folder ``out``; if the block fails, remove it again when this call
    created it and nothing was written there (a refused run leaves no empty folder)."""
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        yield out
    except BaseException:
        if created:
            try:
                out.rmdir()  # only when empty
            except OSError:
                pass
        raise


def _evaluate_one(checkpoint, data_root, split, device, batch_size, out_dir, baseline):
    from .metrics import REGRESSION, evaluate_model
    from .rng import resolve_device
    from .run import DATA_ERRORS, one_line
    from .tasks import build_task

    ckpt, model, meta, cfg, stats = _load_for_evaluation(checkpoint, data_root)
    loss = (ckpt.get("trainer") or {}).get("loss", "ce")
    dev = resolve_device(device)
    model.to(dev)
    out = Path(out_dir) if out_dir else Path(checkpoint).parent
    if cfg["task"] == "bidmc":
        from .evaluate_vitals import evaluate_vitals

        with _out_dir(out):
            try:
                return evaluate_vitals(
                    model,
                    meta,
                    cfg,
                    stats,
                    split,
                    dev,
                    batch_size,
                    out,
                    baseline,
                    name=Path(checkpoint).parent.name,
                )
            except DATA_ERRORS as e:
                raise click.ClickException(one_line(e)) from e
    out.mkdir(parents=True, exist_ok=True)
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
            raise click.ClickException(one_line(e)) from e
        ds = sets[2] if split == "test" else sets[1]
        regression = loss in REGRESSION
        n_classes = None if regression else int(meta.get("d_output") or model.d_output)
        res = evaluate_model(
            model, ds, loss, dev, batch_size, rate=float(rate), n_classes=n_classes
        )
        tag = f"{sr} Hz" if sr else f"rate {rate}"
        if regression:
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
