"""Long Range Arena text tasks at byte level: IMDB reviews and AAN document matching.

**Tokens.** LRA's byte encoder: a text is its raw bytes (UTF-8 for a ``str``), token id =
byte + 1, so ids 1…256 and 0 = padding (``VOCAB_SIZE = 257``), truncated to ``max_length``
(IMDB 4096, AAN 4000 per document). Files are read as raw bytes and never decoded, so a
byte that is not valid UTF-8 is simply one more token, as it is in LRA.

**IMDB** (LRA "text"; the Stanford ``aclImdb_v1.tar.gz``, extracted)::

    aclImdb/train/pos/<id>_<rating>.txt    label 1 (rating 7–10)   12500 reviews
    aclImdb/train/neg/<id>_<rating>.txt    label 0 (rating 1–4)    12500 reviews
    aclImdb/test/{pos,neg}/…                                       25000 reviews

One review per file, the text as written (``<br />`` tags kept: LRA does not clean). Other
entries (``train/unsup/``, ``urls_*.txt``, ``*.feat``, ``imdb.vocab``) are ignored. The
label comes from the folder. Examples are ordered neg, then pos, each by the numeric
``<id>`` (then the file name). LRA has no IMDB validation split: like S4, :func:`read_imdb`
returns the test set as "val" too, unless ``val_fraction`` > 0 holds out a seeded part of
train.

**AAN** (LRA "retrieval"; ``lra_release/tsv_data/new_aan_pairs.{train,eval,test}.tsv``,
train / val / test): no header, one pair per line, five tab-separated fields::

    label \\t id1 \\t id2 \\t text1 \\t text2        label "1.0"/"0.0" (or "1"/"0"):
                                                1 when the two papers are linked by citation

Lines are split at tabs with no quote processing (as LRA reads them), so quotes, commas
and any other byte except tab and newline are plain text; a line ends at ``\\n`` only.

**Storage.** A split's documents are one :class:`TokenSequences`: all the (truncated)
bytes in one uint8 array plus offsets, about 1 byte per token instead of 8; indexing it
returns the int64 id array of one document (bytes + 1), made on access.
:class:`TokenDataset` / :class:`PairTokenDataset` turn ids into right-padded one-hot
float32 rows on the fly (the model's Linear encoder on one-hot rows is an embedding table).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from ..cache import atomic_file

VOCAB_SIZE = 257  # ids 1 … 256 are bytes 0 … 255; 0 is padding
IMDB_MAX_LENGTH = 4096
AAN_MAX_LENGTH = 4000
IMDB_SPLITS = ("train", "test")  # folders of aclImdb; read_imdb adds "val"
IMDB_CLASSES = ("neg", "pos")  # label 0, 1 (and the reading order)
AAN_FILES = {
    "train": "new_aan_pairs.train.tsv",
    "val": "new_aan_pairs.eval.tsv",
    "test": "new_aan_pairs.test.tsv",
}
AAN_COLUMNS = ("label", "id1", "id2", "text1", "text2")

_REVIEW_NAME = re.compile(r"(\d+)_(\d+)\.txt")

PathLike = str | os.PathLike


class TextDataError(ValueError):
    """An LRA text file or folder is missing or malformed (the message names it, and the
    line for a TSV file)."""


def _check_max_length(max_length: int) -> None:
    if int(max_length) < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")


def encode_bytes(data: bytes | str, max_length: int) -> np.ndarray:
    """Token ids (int64) of a text: its bytes (UTF-8 for a ``str``) + 1, truncated to
    ``max_length``. ``"A"`` → ``[66]``, ``"é"`` → ``[196, 170]``."""
    _check_max_length(max_length)
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    return np.frombuffer(raw[:max_length], dtype=np.uint8).astype(np.int64) + 1


class TokenSequences(Sequence):
    """Byte documents stored compactly; item ``i`` is document i's int64 id array.

    ``data`` holds every document's bytes back to back (uint8), ``offsets`` (int64, n + 1)
    where each starts and ends. ``seqs[i]`` → ids (bytes + 1, a new int64 array);
    ``seqs[a:b]``, ``seqs[index_array]`` (ints or a boolean mask) or ``seqs.take(indices)``
    → another :class:`TokenSequences`.
    """

    def __init__(self, data: np.ndarray, offsets: np.ndarray):
        self.data = np.asarray(data, dtype=np.uint8)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        if self.offsets.ndim != 1 or len(self.offsets) == 0 or self.offsets[0] != 0:
            raise ValueError("offsets must be 1-D and start at 0")
        if self.offsets[-1] != len(self.data) or np.any(np.diff(self.offsets) < 0):
            raise ValueError("offsets must be non-decreasing and end at len(data)")

    @classmethod
    def from_bytes(cls, docs: Iterable[bytes]) -> TokenSequences:
        """Store these documents (as given: truncate first)."""
        store = _ByteStore()
        for doc in docs:
            store.append(doc)
        return store.build()

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.take(range(*i.indices(len(self))))
        if isinstance(i, list | tuple | np.ndarray):  # fancy indexing, like a numpy array
            idx = np.asarray(i)
            if idx.dtype == bool:
                if idx.shape != (len(self),):
                    raise IndexError(f"boolean index of shape {idx.shape} for {len(self)}")
                idx = np.flatnonzero(idx)
            return self.take(idx.astype(np.int64, copy=False).reshape(-1))
        n = len(self)
        i = int(i)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for {n} documents")
        i %= n
        return self.data[self.offsets[i] : self.offsets[i + 1]].astype(np.int64) + 1

    def raw(self, i: int) -> bytes:
        """Document i's stored bytes."""
        i = range(len(self))[i]
        return self.data[self.offsets[i] : self.offsets[i + 1]].tobytes()

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per document (int64)."""
        return np.diff(self.offsets)

    @property
    def nbytes(self) -> int:
        """Memory held by the arrays."""
        return self.data.nbytes + self.offsets.nbytes

    def take(self, indices: Iterable[int]) -> TokenSequences:
        """The documents at ``indices``, in that order, as a new (copied) store."""
        return TokenSequences.from_bytes(self.raw(i) for i in indices)

    def __repr__(self) -> str:
        return f"TokenSequences({len(self)} documents, {len(self.data)} tokens)"


class _ByteStore:
    """Appends documents into one growing buffer (no list of per-document objects)."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.offsets = [0]

    def append(self, doc: bytes) -> None:
        self.buf += doc
        self.offsets.append(len(self.buf))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def build(self) -> TokenSequences:
        data = np.frombuffer(self.buf, dtype=np.uint8) if self.buf else np.zeros(0, np.uint8)
        return TokenSequences(data, np.asarray(self.offsets, dtype=np.int64))


# --------------------------------------------------------------------------- IMDB


def _imdb_folder(root: PathLike) -> Path:
    """The ``aclImdb`` folder: ``root`` itself or ``root/aclImdb``."""
    root = Path(root)
    if not root.is_dir():
        raise TextDataError(f"{root}: no such folder (expected the extracted aclImdb folder)")
    if any((root / s).is_dir() for s in IMDB_SPLITS):
        return root
    if (root / "aclImdb").is_dir():
        return root / "aclImdb"
    raise TextDataError(
        f"{root}: neither an aclImdb folder (train/, test/) nor a folder holding aclImdb/ "
        "(extract aclImdb_v1.tar.gz)"
    )


def _review_key(path: Path) -> tuple:
    m = _REVIEW_NAME.fullmatch(path.name)
    return (0, int(m.group(1)), path.name) if m else (1, 0, path.name)


def _read_imdb_split(folder: Path, max_length: int) -> tuple[TokenSequences, np.ndarray]:
    if not folder.is_dir():
        raise TextDataError(f"{folder}: missing split folder (expected aclImdb/{folder.name}/)")
    store, labels = _ByteStore(), []
    for label, name in enumerate(IMDB_CLASSES):
        sub = folder / name
        if not sub.is_dir():
            raise TextDataError(
                f"{sub}: missing folder (expected {folder.name}/pos/ and {folder.name}/neg/)"
            )
        reviews = sorted((p for p in sub.glob("*.txt") if p.is_file()), key=_review_key)
        if not reviews:
            raise TextDataError(f"{sub}: no *.txt reviews (empty split)")
        for path in reviews:
            with open(path, "rb") as f:
                store.append(f.read(max_length))
            labels.append(label)
    return store.build(), np.asarray(labels, dtype=np.int64)


def read_imdb(
    root: PathLike,
    max_length: int = IMDB_MAX_LENGTH,
    val_fraction: float = 0.0,
    seed: int = 0,
) -> dict[str, tuple[TokenSequences, np.ndarray]]:
    """IMDB splits of an aclImdb folder (``root`` = aclImdb or its parent):
    ``{"train", "val", "test"}`` → (documents (ids on indexing), labels int64).

    "val" is the test set itself (the same objects) when ``val_fraction`` is 0, as in
    LRA / S4; otherwise a seeded ``val_fraction`` of train, held out of "train" (both keep
    the file order).
    """
    _check_max_length(max_length)
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    folder = _imdb_folder(root)
    out = {}
    for split in IMDB_SPLITS:
        out[split] = _read_imdb_split(folder / split, max_length)
    if val_fraction == 0.0:
        out["val"] = out["test"]
        return out
    docs, labels = out["train"]
    n_val = round(val_fraction * len(labels))
    if not 0 < n_val < len(labels):
        raise ValueError(
            f"val_fraction {val_fraction} of {len(labels)} training reviews leaves "
            f"{n_val} for val and {len(labels) - n_val} for train"
        )
    order = np.random.default_rng(seed).permutation(len(labels))
    val_idx, train_idx = np.sort(order[:n_val]), np.sort(order[n_val:])
    out["train"] = (docs.take(train_idx), labels[train_idx])
    out["val"] = (docs.take(val_idx), labels[val_idx])
    return out


def write_imdb(root: PathLike, splits: dict[str, list[tuple[str | bytes, int]]]) -> Path:
    """Write ``root/aclImdb/<split>/{pos,neg}/<i>_<rating>.txt`` (a fixture in the real
    layout) from (text, label) lists keyed "train" / "test"; returns the aclImdb folder.

    ``<i>`` counts per folder in the given order; the rating is 7–10 for pos, 1–4 for neg.
    A ``str`` is written as UTF-8, ``bytes`` as they are.
    """
    unknown = set(splits) - set(IMDB_SPLITS)
    if unknown:
        raise ValueError(f"unknown IMDB splits {sorted(unknown)}; expected {IMDB_SPLITS}")
    folder = Path(root) / "aclImdb"
    for split, items in splits.items():
        counts = [0, 0]
        for name in IMDB_CLASSES:
            (folder / split / name).mkdir(parents=True, exist_ok=True)
        for text, label in items:
            if label not in (0, 1):
                raise ValueError(f"{split}: label {label!r} is not 0 or 1")
            i = counts[label]
            counts[label] += 1
            rating = 7 + i % 4 if label else 1 + i % 4
            data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
            (folder / split / IMDB_CLASSES[label] / f"{i}_{rating}.txt").write_bytes(data)
    return folder


# --------------------------------------------------------------------------- AAN


def _aan_folder(root: PathLike) -> Path:
    """The folder holding the AAN TSV files: ``root``, ``root/tsv_data`` or
    ``root/lra_release/tsv_data`` (the first that holds any of them)."""
    root = Path(root)
    if not root.is_dir():
        raise TextDataError(f"{root}: no such folder (expected lra_release/tsv_data/)")
    candidates = (root, root / "tsv_data", root / "lra_release" / "tsv_data")
    for folder in candidates:
        if any((folder / name).is_file() for name in AAN_FILES.values()):
            return folder
    raise TextDataError(
        f"{root}: no AAN files ({', '.join(AAN_FILES.values())}) here, in tsv_data/ or in "
        "lra_release/tsv_data/ (the LRA release, lra_release.gz)"
    )


def _parse_label(field: bytes, where: str) -> int:
    try:
        value = float(field.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise TextDataError(f"{where}: label {field!r} is not a number") from None
    if value not in (0.0, 1.0):
        raise TextDataError(f"{where}: label {field.decode('ascii')!r} is not 0 or 1")
    return int(value)


def read_aan_tsv(
    path: PathLike, max_length: int = AAN_MAX_LENGTH
) -> tuple[TokenSequences, TokenSequences, np.ndarray]:
    """(first documents, second documents, labels int64) of one LRA AAN TSV file, each
    document truncated to ``max_length`` bytes. Empty lines are skipped."""
    _check_max_length(max_length)
    path = Path(path)
    if not path.is_file():
        raise TextDataError(f"{path}: no such file (expected LRA new_aan_pairs.<split>.tsv)")
    first, second, labels = _ByteStore(), _ByteStore(), []
    with open(path, "rb") as f:
        for line_no, line in enumerate(f, start=1):
            if line.endswith(b"\n"):
                line = line[:-1]
            if not line:
                continue
            where = f"{path}:{line_no}"
            fields = line.split(b"\t")
            if len(fields) != len(AAN_COLUMNS):
                raise TextDataError(
                    f"{where}: {len(fields)} columns, expected {len(AAN_COLUMNS)} "
                    f"({', '.join(AAN_COLUMNS)})"
                )
            labels.append(_parse_label(fields[0], where))
            first.append(fields[3][:max_length])
            second.append(fields[4][:max_length])
    if not labels:
        raise TextDataError(f"{path}: no examples (empty split)")
    return first.build(), second.build(), np.asarray(labels, dtype=np.int64)


def read_aan(
    root: PathLike, max_length: int = AAN_MAX_LENGTH
) -> dict[str, tuple[TokenSequences, TokenSequences, np.ndarray]]:
    """AAN splits ``{"train", "val", "test"}`` (val = the ``eval`` file) →
    (first-document ids, second-document ids, labels). ``root`` = the folder of the three
    TSV files, ``lra_release/`` (or ``tsv_data/``'s parent) or the folder above it."""
    folder = _aan_folder(root)
    missing = [name for name in AAN_FILES.values() if not (folder / name).is_file()]
    if missing:
        raise TextDataError(
            f"{folder}: missing {', '.join(missing)} (expected {', '.join(AAN_FILES.values())})"
        )
    return {s: read_aan_tsv(folder / name, max_length) for s, name in AAN_FILES.items()}


def _field(value: str | bytes, what: str) -> bytes:
    data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    if b"\t" in data or b"\n" in data:
        raise ValueError(f"{what} contains a tab or newline, which the TSV cannot hold")
    return data


def write_aan(root: PathLike, splits: dict[str, list[tuple[int, str, str, str, str]]]) -> Path:
    """Write ``root/new_aan_pairs.{train,eval,test}.tsv`` (keys "train", "val", "test";
    only the splits given) from (label, id1, id2, text1, text2) rows, the label as "1.0" /
    "0.0" like the LRA release; each file atomically (a temporary file, then renamed)."""
    unknown = set(splits) - set(AAN_FILES)
    if unknown:
        raise ValueError(f"unknown AAN splits {sorted(unknown)}; expected {tuple(AAN_FILES)}")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        with atomic_file(root / AAN_FILES[split]) as tmp, open(tmp, "wb") as f:
            for n, (label, *fields) in enumerate(rows):
                if label not in (0, 1):
                    raise ValueError(f"{split} row {n}: label {label!r} is not 0 or 1")
                parts = [f"{float(label):.1f}".encode()]
                for value, column in zip(fields, AAN_COLUMNS[1:], strict=True):
                    parts.append(_field(value, f"{split} row {n} {column}"))
                f.write(b"\t".join(parts) + b"\n")
    return root


# --------------------------------------------------------------------------- datasets


def _one_hot(ids: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Fill ``out`` (max_length, vocabulary size), all zeros, with the one-hot rows of ``ids``
    (truncated to max_length), right-padded with id 0; returns ``out``."""
    padded = np.zeros(len(out), dtype=np.int64)
    ids = np.asarray(ids)[: len(out)]
    padded[: len(ids)] = ids
    out[np.arange(len(out)), padded] = 1.0
    return out


class TokenDataset(Dataset):
    """``(x, y)``: x = (max_length, vocab_size) float32 one-hot rows of a document's ids,
    right-padded with id 0 (a padding row is the one-hot of id 0), y = int label.

    ``xs`` is any sequence of id arrays (a :class:`TokenSequences` or a list); ``targets``
    lists the labels. Build one from a split: ``TokenDataset(*read_imdb(root)["train"],
    max_length=4096)``; ``vocab_size`` (ids 0 … vocab_size − 1) defaults to the bytes'
    VOCAB_SIZE (ListOps: 16).
    """

    def __init__(
        self,
        xs: Sequence[np.ndarray],
        ys: Sequence[int],
        max_length: int,
        vocab_size: int = VOCAB_SIZE,
    ):
        if len(xs) != len(ys):
            raise ValueError(f"{len(xs)} documents but {len(ys)} labels")
        _check_max_length(max_length)
        self.xs, self.max_length, self.vocab_size = xs, int(max_length), int(vocab_size)
        self.targets = [int(y) for y in ys]

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x = np.zeros((self.max_length, self.vocab_size), dtype=np.float32)
        return torch.from_numpy(_one_hot(self.xs[i], x)), self.targets[i]


class PairTokenDataset(Dataset):
    """``(x, y)``: x = (2, max_length, VOCAB_SIZE) float32, the one-hot rows of the two
    documents (as in :class:`TokenDataset`) stacked on a leading axis, y = int label.

    The model encodes both with shared weights and combines [a, b, a·b, a−b]. Build one from
    a split: ``PairTokenDataset(*read_aan(root)["train"], max_length=4000)``.
    """

    def __init__(
        self,
        xs1: Sequence[np.ndarray],
        xs2: Sequence[np.ndarray],
        ys: Sequence[int],
        max_length: int,
    ):
        if not len(xs1) == len(xs2) == len(ys):
            raise ValueError(f"{len(xs1)}, {len(xs2)} documents but {len(ys)} labels")
        _check_max_length(max_length)
        self.xs1, self.xs2, self.max_length = xs1, xs2, int(max_length)
        self.targets = [int(y) for y in ys]

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x = np.zeros((2, self.max_length, VOCAB_SIZE), dtype=np.float32)
        _one_hot(self.xs1[i], x[0])
        _one_hot(self.xs2[i], x[1])
        return torch.from_numpy(x), self.targets[i]
