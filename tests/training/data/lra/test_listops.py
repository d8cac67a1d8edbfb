"""ListOps (LRA): generator → LRA TSV files → loader, labels re-computed independently."""

from __future__ import annotations

import time

import pytest

from liquid_stream.training.data.lra import listops as lo

pytestmark = pytest.mark.slow


def evaluate(source: str) -> int:
    """An independent evaluator: a stack machine over the flat tokens (parentheses dropped)."""
    stack: list = []
    for tok in source.split():
        if tok in "()":
            continue
        if tok.startswith("["):
            stack.append([tok])
        elif tok == "]":
            op, *args = stack.pop()
            s = sorted(args)
            result = {
                "[MAX": s[-1],
                "[MIN": s[0],
                "[SM": sum(args) % 10,
                "[MED": (s[(len(s) - 1) // 2] + s[len(s) // 2]) // 2,
            }[op]
            if not stack:
                return result
            stack[-1].append(result)
        else:
            stack[-1].append(int(tok))
    raise AssertionError("unbalanced expression")


def test_documented_example_and_median_rounding():
    tree = ("[MAX", [2, 9, ("[MIN", [4, 7]), 0])
    src = lo.to_source(tree)
    assert src == "( ( ( ( ( [MAX 2 ) 9 ) ( ( ( [MIN 4 ) 7 ) ] ) ) 0 ) ] )"
    assert lo.value(tree) == evaluate(src) == 9
    assert lo.value(("[MED", [2, 5])) == 3 == evaluate("[MED 2 5 ]")  # median 3.5 → 3
    assert lo.value(("[SM", [9, 8, 7])) == 4


def test_generated_files_read_back_with_independent_labels(tmp_path):
    grammar = dict(min_length=20, max_length=300)
    lo.write_dataset(tmp_path, 200, 30, 30, seed=1, **grammar)
    data = lo.read_dataset(tmp_path, max_length=300)
    sources = {}
    for split in lo.SPLITS:
        with open(tmp_path / f"basic_{split}.tsv") as f:
            lines = f.read().splitlines()
        assert lines[0] == "Source\tTarget"
        sources[split] = [ln.split("\t")[0] for ln in lines[1:]]
        xs, ys = data[split]
        assert len(xs) == len(ys) == len(sources[split])
        for src, x, y in zip(sources[split], xs, ys, strict=True):
            assert y == evaluate(src)
            assert 20 < len(x) < 300 and src.count("(") == src.count(")")
    assert not set(sources["train"]) & (set(sources["val"]) | set(sources["test"]))
    labels = set(data["train"][1].tolist())
    assert len(labels) >= 8  # all operators and digits show up


def test_lra_lengths():
    t = time.perf_counter()
    examples = lo.generate(3, seed=0)  # the LRA defaults: 500 < length < 2000, depth ≤ 10
    assert time.perf_counter() - t < 60
    for src, y in examples:
        n = len(lo.tokenize(src))
        assert 500 < n < 2000 and y == evaluate(src)


@pytest.mark.parametrize(
    "content,match",
    [
        ("Src\tTarget\n[MAX 1 2 ]\t2\n", "header"),
        ("Source\tTarget\n[MAX 1 2 ]\tx\n", r":2: target 'x'"),
        ("Source\tTarget\n[MAX 1 2 ]\t12\n", "outside"),
        ("Source\tTarget\n[MAX 1 2 ]\t2\n[MAX 1 [FOO 2 ] ]\t2\n", r":3: unknown token '\[FOO'"),
        ("Source\tTarget\n[MAX 1 2 ]\n", "1 columns"),
        ("Source\tTarget\n", "no examples"),
        ("Source\tTarget\n[MAX " + "1 " * 50 + "]\t1\n", "max_length"),
    ],
)
def test_bad_files_raise_clear_errors(tmp_path, content, match):
    path = tmp_path / "basic_train.tsv"
    path.write_text(content)
    with pytest.raises(lo.ListOpsDataError, match=match):
        lo.read_tsv(path, max_length=40)


def test_missing_split_files(tmp_path):
    lo.write_tsv(tmp_path / "basic_train.tsv", [("[MAX 1 2 ]", 2)])
    with pytest.raises(lo.ListOpsDataError, match="basic_val.tsv, basic_test.tsv"):
        lo.read_dataset(tmp_path)


def test_task_builds_from_the_lra_files_and_learns(tmp_path):
    """The ``listops`` task reads an LRA folder (data.root); a few optimisation steps of the
    cpu-preset model on one batch reduce the loss."""
    import torch
    from test_lra_tasks import steps_reduce_loss

    from liquid_stream.training.config import load_config
    from liquid_stream.training.tasks import build_task

    lo.write_dataset(tmp_path, 64, 8, 8, seed=2, min_length=20, max_length=120, max_depth=5)
    cfg = load_config("listops", "cpu", [f"data.root={tmp_path}", "data.max_length=120"])
    train, val, test, meta, loss = build_task(cfg)
    assert (len(train), len(val), len(test), loss) == (64, 8, 8, "ce")
    x, y = train[0]
    assert x.shape == (120, 16) and torch.equal(x.sum(1), torch.ones(120))
    assert y == evaluate(open(tmp_path / "basic_train.tsv").read().splitlines()[1].split("\t")[0])
    steps_reduce_loss(cfg, train, meta, n=16, steps=25)


def test_data_cli_writes_a_readable_set(tmp_path):
    from click.testing import CliRunner

    from liquid_stream.cli import main

    res = CliRunner().invoke(
        main,
        [
            "data",
            "listops",
            str(tmp_path),
            "--train",
            "20",
            "--val",
            "5",
            "--test",
            "5",
            "--min-length",
            "10",
            "--max-length",
            "80",
        ],
    )
    assert res.exit_code == 0, res.output
    data = lo.read_dataset(tmp_path, max_length=80)
    assert [len(data[s][1]) for s in lo.SPLITS] == [20, 5, 5]
    bad = CliRunner().invoke(
        main, ["data", "listops", str(tmp_path), "--min-length", "90", "--max-length", "80"]
    )
    assert bad.exit_code != 0 and "min-length" in bad.output


def test_generated_set_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("LIQUID_STREAM_CACHE", str(tmp_path))
    root = lo.ensure_listops(10, 3, 3, seed=4, min_length=10, max_length=60)
    assert root.parent == tmp_path and root.name.startswith("listops-")
    stamp = (root / "basic_train.tsv").stat().st_mtime_ns
    assert lo.ensure_listops(10, 3, 3, seed=4, min_length=10, max_length=60) == root
    assert (root / "basic_train.tsv").stat().st_mtime_ns == stamp  # not rebuilt
    assert [len(lo.read_dataset(root, 60)[s][1]) for s in lo.SPLITS] == [10, 3, 3]
