"""ListOps (Long Range Arena): the generator, its TSV format and a loader.

A ListOps example is a nested expression over the digits 0–9 with four operators,

    [MAX 2 9 [MIN 4 7 ] 0 ]  →  9        MAX, MIN, MED (the median, truncated to an int),
                                         SM (sum modulo 10)

written in the LRA files (``basic_train.tsv``, ``basic_val.tsv``, ``basic_test.tsv``; a
``Source\\tTarget`` header, then one example per line) as the binary tree the LRA generator
builds — an operator is applied to its arguments one pair at a time, every pair in
parentheses::

    ( ( ( ( [MAX 2 ) 9 ) ( ( ( [MIN 4 ) 7 ) ] ) ) 0 ) ] )

The parentheses repeat what the operators and ``]`` already say; :func:`tokenize` drops
them and maps the 15 remaining symbols to ids 1…15 (0 = padding), so a model reads at most
``max_length`` tokens (2000 in LRA). Generation follows the LRA grammar: a node is a digit
with probability 0.75 (always at ``max_depth``), else an operator with 2…``max_args``
arguments; examples whose length (digits + 2 per operator) is outside
(``min_length``, ``max_length``) are redrawn.
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

import numpy as np

from .. import cache

OPERATORS = ("[MAX", "[MIN", "[MED", "[SM")
END = "]"
VOCAB = (*OPERATORS, END, *(str(d) for d in range(10)))  # ids 1 … 15; 0 is padding
TOKEN_ID = {t: i + 1 for i, t in enumerate(VOCAB)}
SPLITS = ("train", "val", "test")
VALUE_P = 0.75  # probability that a node (above max_depth) is a digit


class ListOpsDataError(ValueError):
    """A ListOps file is missing or malformed (the message names file and line)."""


def _tree(rng: random.Random, depth: int, max_depth: int, max_args: int):
    """A random expression: an int, or ``(op, [args])``; with its length in tokens."""
    if depth >= max_depth or rng.random() < VALUE_P:
        return rng.randrange(10), 1
    args, length = [], 2
    for _ in range(rng.randint(2, max_args)):
        sub, n = _tree(rng, depth + 1, max_depth, max_args)
        args.append(sub)
        length += n
    return (rng.choice(OPERATORS), args), length


def value(tree) -> int:
    """The value of a tree from :func:`_tree`."""
    if isinstance(tree, int):
        return tree
    op, args = tree
    vals = [value(a) for a in args]
    if op == "[MAX":
        return max(vals)
    if op == "[MIN":
        return min(vals)
    if op == "[MED":
        return int(np.median(vals))
    return sum(vals) % 10


def to_source(tree) -> str:
    """The LRA text of a tree: ``( … )`` around every (function, argument) pair."""
    if isinstance(tree, int):
        return str(tree)
    op, args = tree
    text = op
    for a in args:
        text = f"( {text} {to_source(a)} )"
    return f"( {text} {END} )"


def generate(
    n: int,
    seed: int = 0,
    max_depth: int = 10,
    max_args: int = 10,
    min_length: int = 500,
    max_length: int = 2000,
) -> list[tuple[str, int]]:
    """``n`` distinct (source, target) examples of the LRA grammar."""
    rng = random.Random(seed)
    seen: dict[str, int] = {}
    while len(seen) < n:
        tree, length = _tree(rng, 1, max_depth, max_args)
        if min_length < length < max_length:
            seen.setdefault(to_source(tree), value(tree))
    return list(seen.items())


def write_tsv(path, examples: list[tuple[str, int]]) -> None:
    """Write examples in the LRA format (atomically: a temporary file, then renamed)."""
    with cache.atomic_file(path) as tmp, open(tmp, "w", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(["Source", "Target"])
        w.writerows(examples)


def write_dataset(root, n_train: int, n_val: int, n_test: int, seed: int = 0, **grammar) -> Path:
    """``root/basic_{train,val,test}.tsv`` with disjoint examples, as LRA ships them."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    data = generate(n_train + n_val + n_test, seed, **grammar)
    parts = (data[:n_train], data[n_train : n_train + n_val], data[n_train + n_val :])
    for split, part in zip(SPLITS, parts, strict=True):
        write_tsv(root / f"basic_{split}.tsv", part)
    return root


def ensure_listops(n_train: int, n_val: int, n_test: int, seed: int = 0, **grammar) -> Path:
    """The cached generated set for these settings, ``$LIQUID_STREAM_CACHE/listops-…``,
    written (atomically, under a file lock: e.g. one per data-parallel rank) if missing."""
    g = {"min_length": 500, "max_length": 2000, "max_depth": 10, "max_args": 10, **grammar}
    values = (
        n_train,
        n_val,
        n_test,
        g["min_length"],
        g["max_length"],
        g["max_depth"],
        g["max_args"],
        seed,
    )
    root = cache.cache_dir() / ("listops-" + "-".join(str(v) for v in values))

    def build() -> None:
        with cache.atomic_dir(root) as tmp:
            write_dataset(tmp, n_train, n_val, n_test, seed, **g)

    def usable() -> bool:
        return all((root / f"basic_{s}.tsv").is_file() for s in SPLITS)

    return cache.ensure_built(root, usable, build)


def tokenize(source: str, where: str = "source") -> np.ndarray:
    """Token ids (int64) of a source text, parentheses dropped."""
    ids = []
    for tok in source.split():
        if tok in "()":
            continue
        if tok not in TOKEN_ID:
            raise ListOpsDataError(f"{where}: unknown token {tok!r}")
        ids.append(TOKEN_ID[tok])
    if not ids:
        raise ListOpsDataError(f"{where}: empty expression")
    return np.asarray(ids, dtype=np.int64)


def read_tsv(path, max_length: int = 2000) -> tuple[list[np.ndarray], np.ndarray]:
    """(token id arrays, labels) of one LRA ListOps TSV; clear errors for a missing file,
    a wrong header, a bad label, an unknown token or an expression over ``max_length``."""
    path = Path(path)
    if not path.is_file():
        raise ListOpsDataError(f"{path}: no such file (expected LRA basic_<split>.tsv)")
    xs, ys = [], []
    with open(path, newline="") as f:
        rows = csv.reader(f, delimiter="\t")
        header = next(rows, None)
        if header != ["Source", "Target"]:
            raise ListOpsDataError(f"{path}: header {header!r}, expected ['Source', 'Target']")
        for line, row in enumerate(rows, start=2):
            where = f"{path}:{line}"
            if len(row) != 2:
                raise ListOpsDataError(f"{where}: {len(row)} columns, expected 2")
            try:
                label = int(row[1])
            except ValueError:
                raise ListOpsDataError(f"{where}: target {row[1]!r} is not an integer") from None
            if not 0 <= label <= 9:
                raise ListOpsDataError(f"{where}: target {label} outside 0…9")
            ids = tokenize(row[0], where)
            if len(ids) > max_length:
                raise ListOpsDataError(f"{where}: {len(ids)} tokens > max_length {max_length}")
            xs.append(ids)
            ys.append(label)
    if not xs:
        raise ListOpsDataError(f"{path}: no examples")
    return xs, np.asarray(ys, dtype=np.int64)


def read_dataset(root, max_length: int = 2000) -> dict[str, tuple[list[np.ndarray], np.ndarray]]:
    """All three splits of an LRA ListOps folder (``basic_{train,val,test}.tsv``)."""
    root = Path(root)
    missing = [s for s in SPLITS if not (root / f"basic_{s}.tsv").is_file()]
    if missing:
        raise ListOpsDataError(
            f"{root}: missing {', '.join(f'basic_{s}.tsv' for s in missing)} (LRA ListOps "
            f"layout; `training.data.lra.listops.write_dataset` generates one)"
        )
    return {s: read_tsv(root / f"basic_{s}.tsv", max_length) for s in SPLITS}
