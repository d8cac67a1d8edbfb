"""The paper's remaining benchmarks as trainer tasks: each builds from data in its real
on-disk format (written here by the loaders' fixture writers, or the generators), yields
what the model takes, and a few optimisation steps of its cpu-preset model reduce the loss."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from liquid_stream import LiquidS4Model, make_optimizer
from liquid_stream.training.config import load_config
from liquid_stream.training.tasks import build_task

pytestmark = pytest.mark.slow


def steps_reduce_loss(
    cfg: dict, dataset, meta: dict, n: int = 8, steps: int = 20, lr: float = 5e-3
) -> list:
    """``steps`` AdamW steps of the task's model on its first ``n`` examples: the loss must
    fall by 30 %."""
    torch.manual_seed(0)
    model = LiquidS4Model(d_input=meta["d_input"], d_output=meta["d_output"], **cfg["model"])
    opt = make_optimizer(model, lr=lr, weight_decay=0.0)
    xb = torch.stack([dataset[i][0] for i in range(n)])
    yb = torch.tensor([dataset[i][1] for i in range(n)])
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0], losses
    return losses


# --------------------------------------------------------------------------- images


@pytest.fixture
def cifar_root(tmp_path):
    from liquid_stream.training.data.lra.images import write_cifar10

    rng = np.random.default_rng(0)

    def images(labels):  # noise around a class-dependent colour: learnable in a few steps
        colour = np.stack([labels * 25, 250 - labels * 25, (labels * 75) % 256], -1)
        noise = rng.integers(-20, 21, (len(labels), 32, 32, 3))
        return np.clip(colour[:, None, None] + noise, 0, 255).astype(np.uint8), labels

    train, test = images(np.arange(40) % 10), images(np.arange(10))
    write_cifar10(tmp_path / "cifar-10-batches-py", train, test)
    return tmp_path, train


@pytest.mark.parametrize("task,channels", [("scifar", 3), ("lra-cifar", 1)])
def test_cifar_tasks_read_the_python_batches(cifar_root, task, channels):
    root, (images, labels) = cifar_root
    cfg = load_config(
        task,
        "cpu",
        [
            f"data.root={root}",
            "data.source=cifar10",
            f"data.mode={'rgb' if channels == 3 else 'gray'}",
        ],
    )
    train, val, test, meta, loss = build_task(cfg)
    assert (len(train), len(val), len(test), loss) == (36, 4, 10, "ce")
    assert meta["d_input"] == channels and meta["length"] == 1024 and meta["d_output"] == 10
    x, y = train[0]
    assert x.shape == (1024, channels) and x.dtype == torch.float32
    i = int(train_index(cfg, len(labels))[0])
    assert y == labels[i]
    pixels = images[i].reshape(1024, 3).astype(np.float64) / 255  # raster order
    if channels == 1:
        pixels = pixels @ np.array([[0.299], [0.587], [0.114]])
    expected = (pixels - np.array(meta["input_mean"])) / np.array(meta["input_std"])
    assert np.allclose(x.numpy(), expected, atol=1e-5)
    # standardised with the train split's statistics
    xs = torch.stack([train[j][0] for j in range(len(train))]).double()
    assert torch.allclose(xs.mean((0, 1)), torch.zeros(channels, dtype=torch.float64), atol=1e-6)
    steps_reduce_loss(cfg, train, meta)


def train_index(cfg: dict, n: int) -> np.ndarray:
    from liquid_stream.training.data.lra.images import split_train_val

    return split_train_val(n, cfg["data"]["val_fraction"], cfg["train"]["seed"])[0]


def test_cifar_needs_a_path_and_says_so():
    cfg = load_config("scifar", "paper")
    with pytest.raises(ValueError, match="--data PATH .*fashion-mnist"):
        build_task(cfg)


def test_fashion_mnist_task_on_the_real_images(tmp_path):
    """Real pixels: the Debian package when installed, else an IDX fixture at data.root."""
    from liquid_stream.training.data.lra.images import FASHION_MNIST_DIR

    sets = [f"data.max_train={40}", "data.max_eval=10"]
    from pathlib import Path

    if not Path(FASHION_MNIST_DIR).is_dir():
        pytest.skip("Debian dataset-fashion-mnist is not installed (make test installs it)")
    cfg = load_config("fashion-mnist", "cpu", sets)
    train, val, test, meta, _ = build_task(cfg)
    assert (len(train), len(val), len(test)) == (40, 10, 10)
    assert meta["length"] == 784 and meta["d_input"] == 1 and meta["source"] == "fashion-mnist"
    xs = torch.stack([train[j][0] for j in range(len(train))]).double()
    assert abs(xs.mean()) < 1e-6 and abs(xs.std() - 1) < 1e-3  # the train split's statistics
    steps_reduce_loss(cfg, train, meta)


# ----------------------------------------------------------------------------- text


def reviews(rng, n: int, label: int) -> list:
    words = ["good", "great", "fine"] if label else ["bad", "awful", "dull"]
    return [(" ".join(rng.choice(words + ["film", "plot", "the"], 60)), label) for _ in range(n)]


def test_imdb_task_reads_aclimdb(tmp_path):
    from liquid_stream.training.data.lra.lra_text import VOCAB_SIZE, write_imdb

    rng = np.random.default_rng(0)
    write_imdb(
        tmp_path,
        {
            "train": reviews(rng, 6, 1) + reviews(rng, 6, 0),
            "test": reviews(rng, 3, 1) + reviews(rng, 3, 0),
        },
    )
    cfg = load_config("imdb", "cpu", [f"data.root={tmp_path}", "data.max_length=256"])
    train, val, test, meta, _ = build_task(cfg)
    assert (len(train), len(val), len(test)) == (12, 6, 6) and meta["val_split"] == "test"
    x, y = train[0]
    assert x.shape == (256, VOCAB_SIZE) and torch.equal(x.sum(1), torch.ones(256))
    cfg2 = load_config("imdb", "cpu", [f"data.root={tmp_path}", "data.val_fraction=0.25"])
    tr2, val2, _, meta2, _ = build_task(cfg2)
    assert (len(tr2), len(val2), meta2["val_split"]) == (9, 3, "train holdout")
    steps_reduce_loss(cfg, train, meta)
    with pytest.raises(ValueError, match="--data PATH"):
        build_task(load_config("imdb", "cpu"))


def test_aan_task_pairs_and_the_retrieval_head(tmp_path):
    from liquid_stream.training.data.lra.lra_text import VOCAB_SIZE, write_aan

    rng = np.random.default_rng(1)

    def pairs(n):
        out = []
        for i in range(n):
            a = " ".join(rng.choice(["cite", "model", "parse", "tree"], 40))
            same = i % 2 == 0
            b = a if same else " ".join(rng.choice(["graph", "speech", "lexicon"], 40))
            out.append((int(same), f"p{i}", f"q{i}", a, b))
        return out

    write_aan(tmp_path, {"train": pairs(8), "val": pairs(4), "test": pairs(4)})
    cfg = load_config("aan", "cpu", [f"data.root={tmp_path}", "data.max_length=128"])
    train, val, test, meta, _ = build_task(cfg)
    assert (len(train), len(val), len(test)) == (8, 4, 4)
    x, y = train[0]
    assert x.shape == (2, 128, VOCAB_SIZE) and y == 1
    steps_reduce_loss(cfg, train, meta)
    with pytest.raises(ValueError, match="decoder = pair"):
        build_task(load_config("aan", "cpu", [f"data.root={tmp_path}", "model.decoder=pool"]))


# ------------------------------------------------------------------ pathfinder / path-x


@pytest.mark.parametrize("task,resolution", [("pathfinder", 32), ("pathx", 128)])
def test_pathfinder_tasks_read_generated_lra_folders(tmp_path, task, resolution):
    """The generator writes the LRA layout (PNG + metadata); the task reads it back, splits
    80/10/10 and scales pixels to [−1, 1] (Path-X: L = 16384, checkpointed blocks)."""
    from liquid_stream.training.data.lra import pathfinder as pf

    pf.write_dataset(tmp_path, 20, resolution=resolution, seed=3, per_batch=10)
    images, labels = pf.read_dataset(tmp_path, resolution=resolution)
    over = [f"data.root={tmp_path}"] + (
        ["model.n_layers=1", "model.d_model=8"] if task == "pathx" else []
    )
    cfg = load_config(task, "cpu", over + ["data.difficulty=curv_contour_length_14"])
    train, val, test, meta, _ = build_task(cfg)
    assert (len(train), len(val), len(test)) == (16, 2, 2)
    assert meta["length"] == resolution**2 and meta["d_input"] == 1
    train_idx = pf.split_indices(20, cfg["train"]["seed"], 0.1, 0.1)[0]
    x, y = train[0]
    assert x.shape == (resolution**2, 1) and y == labels[train_idx[0]]
    expected = (images[train_idx[0]].reshape(-1, 1) / 255.0 - 0.5) / 0.5
    assert np.allclose(x.numpy(), expected, atol=1e-6)
    assert cfg["train"]["checkpoint_blocks"] == (task == "pathx")
    steps_reduce_loss(cfg, train, meta, steps=25 if task == "pathfinder" else 15, lr=0.02)


# ------------------------------------------------------------------ through the trainer


def test_train_cli_runs_the_pair_and_checkpointed_tasks(tmp_path):
    """`liquid-stream train aan` (pairs through the trainer, the pair decoder in the
    checkpoint) and `train pathx` (L = 16384, checkpointed blocks, grad_accum 2) end to end;
    the best checkpoints load back (weights_only) as the same kind of model."""
    from click.testing import CliRunner

    from liquid_stream.cli import main
    from liquid_stream.nn.checkpoint import model_from_checkpoint
    from liquid_stream.training.data.lra import pathfinder as pf
    from liquid_stream.training.data.lra.lra_text import write_aan

    text = "the parser cites the tree model " * 8
    rows = [(i % 2, f"a{i}", f"b{i}", text, text[::-1] if i % 2 else text) for i in range(12)]
    write_aan(tmp_path / "aan", {"train": rows[:8], "val": rows[8:10], "test": rows[10:]})
    pf.write_dataset(tmp_path / "pathx", 10, resolution=128, seed=1, per_batch=10)
    runs = {
        "aan": [f"--data={tmp_path / 'aan'}", "--set", "data.max_length=64"],
        "pathx": [
            f"--data={tmp_path / 'pathx'}",
            "--set",
            "data.difficulty=curv_contour_length_14",
            "--set",
            "model.n_layers=1",
            "--set",
            "model.d_model=8",
        ],
    }
    for task, extra in runs.items():
        out = tmp_path / f"run-{task}"
        res = CliRunner().invoke(
            main,
            [
                "train",
                task,
                "--preset",
                "cpu",
                "--out",
                str(out),
                "--max-steps",
                "2",
                "--set",
                "train.progress=false",
                *extra,
            ],
        )
        assert res.exit_code == 0, res.output
        model, meta = model_from_checkpoint(out / "best.pt")
        assert meta["task"] == task
        assert (model.decoder == "pair") == (task == "aan")
        assert "test (best.pt)" in res.output


# ------------------------------------------------------------------------- configs

# The paper's appendix table (docs/paper.md, "The paper's hyperparameters"): depth, H, N,
# norm, pre-norm, dropout, lr, batch, epochs, weight decay, liquid order.
PAPER = {
    "listops": (9, 128, 7, "batch", True, 0.01, 0.002, 12, 30, 0.03, 5),
    "imdb": (4, 128, 7, "batch", True, 0.1, 0.003, 8, 50, 0.01, 6),
    "aan": (6, 256, 64, "batch", False, 0.2, 0.005, 16, 20, 0.05, 2),
    "lra-cifar": (6, 512, 512, "layer", False, 0.1, 0.01, 16, 200, 0.03, 3),
    "pathfinder": (6, 256, 64, "batch", True, 0.0, 0.0004, 4, 200, 0.03, 2),
    "pathx": (6, 320, 64, "batch", True, 0.0, 0.001, 8, 60, 0.05, 2),
    "scifar": (6, 512, 512, "layer", False, 0.1, 0.01, 50, 200, 0.03, 3),
}


@pytest.mark.parametrize("task", sorted(PAPER))
def test_paper_presets_are_the_papers_table(task):
    from liquid_stream.training.config import available_tasks

    assert task in available_tasks()
    cfg = load_config(task, "paper")
    m, o = cfg["model"], cfg["optim"]
    got = (
        m["n_layers"],
        m["d_model"],
        m["d_state"],
        m["norm"],
        m["prenorm"],
        m["dropout"],
        o["lr"],
        o["batch_size"],
        o["epochs"],
        o["weight_decay"],
        m["liquid_order"],
    )
    assert got == PAPER[task]
    assert m["liquid"] == "pb" and m["bidirectional"] and m["dt_max"] == 0.2
    L = {"listops": 2000, "imdb": 4096, "aan": 4000, "pathx": 16384}.get(task, 1024)
    assert 0.5 / L <= m["dt_min"] <= 2 / L  # dt_min ∝ 1 / L
    cpu = load_config(task, "cpu")  # every task has a small CPU preset
    assert cpu["train"]["device"] == "cpu" and cpu["model"]["d_model"] <= 32
