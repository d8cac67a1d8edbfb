"""Image classification sets read as pixel sequences: CIFAR-10 and Fashion-MNIST.

**CIFAR-10, "python version"** (``cifar-10-python.tar.gz`` from
https://www.cs.toronto.edu/~kriz/cifar.html, extracted to ``cifar-10-batches-py/``)::

    data_batch_1 … data_batch_5   10000 training images each
    test_batch                    10000 test images
    batches.meta                  {b"label_names": [b"airplane", …], …}

Each file is a pickle (protocol 2, written by Python 2, so it is read with
``encoding="bytes"`` and its keys are bytes) of a dict: ``b"data"`` a uint8 numpy array
(n, 3072) — per image 1024 red, then 1024 green, then 1024 blue bytes, each plane the 32×32
image row-major —, ``b"labels"`` n ints 0…9, ``b"batch_label"`` and ``b"filenames"``.
A pickle can run code when loaded, so these files are read with :class:`_RestrictedUnpickler`,
which resolves only the few globals a pickled numpy array needs and refuses anything else.

**Fashion-MNIST, IDX** (Debian ``dataset-fashion-mnist`` installs it in
``/usr/share/datasets/fashion-mnist``; ``.gz`` or uncompressed)::

    train-images-idx3-ubyte(.gz)  train-labels-idx1-ubyte(.gz)   60000 images / labels
    t10k-images-idx3-ubyte(.gz)   t10k-labels-idx1-ubyte(.gz)    10000 images / labels

An IDX file is a big-endian magic ``00 00 TT DD`` (TT the element type, 0x08 = uint8; DD the
number of dimensions: 3 for images, 1 for labels), DD big-endian uint32 sizes, then the
elements, row-major: 0x00000803 (n, 28, 28) images, 0x00000801 (n,) labels.

**As sequences** (sequential CIFAR / LRA "Image"): an image is read in raster order — row 0
left to right, then row 1, … — as a sequence of H·W pixels; ``"rgb"`` keeps the 3 channels
(sCIFAR), ``"gray"`` takes 0.299 R + 0.587 G + 0.114 B (LRA's grayscale CIFAR). Values are
scaled to [0, 1] and standardised per channel with the training set's mean and std.
"""

from __future__ import annotations

import gzip
import io
import pickle
import struct
import zlib
from pathlib import Path

import numpy as np
import torch

from ..cache import atomic_file

CIFAR10_DIRNAME = "cifar-10-batches-py"
CIFAR10_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST_BATCH = "test_batch"
CIFAR10_META = "batches.meta"
CIFAR10_LABELS = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
CIFAR10_SIZE = 32

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_LABELS = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
FASHION_MNIST_SPLITS = {"train": "train", "test": "t10k"}  # split → file name prefix

GRAY_WEIGHTS = (0.299, 0.587, 0.114)  # ITU-R BT.601 luma
MODES = ("rgb", "gray")


class ImageDataError(ValueError):
    """An image data file is missing or malformed (the message names the file)."""


# --------------------------------------------------------------------------- CIFAR-10 pickles


def _latin1_encode(text: str, encoding: str = "latin1") -> bytes:
    """``_codecs.encode`` as protocol-2 pickles of ``bytes`` use it (text → latin-1 bytes)."""
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise pickle.UnpicklingError(f"_codecs.encode with encoding {encoding!r} not allowed")
    return text.encode("latin1")


def _safe_globals() -> dict[tuple[str, str], object]:
    """What a protocol-2 pickle of a dict of numpy arrays, lists, ints and bytes refers to."""
    try:  # numpy ≥ 2
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy 1.x
        from numpy.core.multiarray import _reconstruct
    return {
        # ndarray.__reduce__: _reconstruct(ndarray, (0,), b"b") then __setstate__ (BUILD);
        # numpy 1.x and Python 2 (the original files) name the module numpy.core.multiarray,
        # numpy 2 writes numpy._core.multiarray
        ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,  # dtype.__reduce__: dtype("u1", False, True) + state
        # Python 3 pickles bytes (keys, the array buffer) at protocol 2 as
        # _codecs.encode(latin-1 text, "latin1"); only that encoding is let through
        ("_codecs", "encode"): _latin1_encode,
    }


class _RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves only :func:`_safe_globals` (numpy array reconstruction)
    and raises :class:`ImageDataError` for any other global, before anything is called."""

    def __init__(self, file, path: Path):
        super().__init__(file, encoding="bytes")
        self.path = path
        self.allowed = _safe_globals()

    def find_class(self, module: str, name: str):
        try:
            return self.allowed[(module, name)]
        except KeyError:
            raise ImageDataError(
                f"{self.path}: forbidden global {module}.{name} in the pickle (a CIFAR-10 "
                f"batch only holds numpy arrays, lists, ints and bytes; refusing to load it)"
            ) from None

    def persistent_load(self, pid):
        raise ImageDataError(f"{self.path}: persistent id in the pickle; refusing to load it")


def _load_pickle(path: Path) -> dict:
    """A CIFAR-10 pickle as a dict with bytes keys (str keys are encoded)."""
    if not path.is_file():
        raise ImageDataError(f"{path}: no such file")
    try:
        with open(path, "rb") as f:
            obj = _RestrictedUnpickler(f, path).load()
    except ImageDataError:
        raise
    except Exception as e:  # truncated or corrupt: EOFError, UnpicklingError, ValueError, …
        raise ImageDataError(
            f"{path}: truncated or corrupt pickle ({type(e).__name__}: {e}); "
            f"re-extract cifar-10-python.tar.gz"
        ) from e
    if not isinstance(obj, dict):
        raise ImageDataError(f"{path}: pickle holds a {type(obj).__name__}, expected a dict")
    return {k.encode() if isinstance(k, str) else k: v for k, v in obj.items()}


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(data uint8 (n, 3072), labels int64 (n,)) of one CIFAR-10 batch file, validated."""
    batch = _load_pickle(path)
    missing = [k.decode() for k in (b"data", b"labels") if k not in batch]
    if missing:
        keys = sorted(
            k.decode(errors="replace") if isinstance(k, bytes) else repr(k) for k in batch
        )
        raise ImageDataError(f"{path}: no key {', '.join(missing)} (keys: {keys})")
    data = batch[b"data"]
    if (
        not isinstance(data, np.ndarray)
        or data.dtype != np.uint8
        or data.ndim != 2
        or data.shape[1] != 3 * CIFAR10_SIZE**2
    ):
        got = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise ImageDataError(f"{path}: data is {got}, expected uint8 (n, 3072)")
    try:
        labels = np.asarray(batch[b"labels"], dtype=np.int64)
    except (TypeError, ValueError) as e:
        raise ImageDataError(f"{path}: labels are not integers ({e})") from None
    if labels.shape != (len(data),):
        raise ImageDataError(
            f"{path}: {labels.size} labels for {len(data)} images (labels shape {labels.shape})"
        )
    bad = (labels < 0) | (labels >= len(CIFAR10_LABELS))
    if bad.any():
        i = int(np.argmax(bad))
        raise ImageDataError(f"{path}: label {labels[i]} of image {i} outside 0…9")
    return data, labels


def _label_names(path: Path) -> list[str]:
    """``batches.meta``'s ``label_names``; the standard 10 names if the file is absent."""
    if not path.is_file():
        return list(CIFAR10_LABELS)
    names = _load_pickle(path).get(b"label_names")
    if not isinstance(names, list) or len(names) != len(CIFAR10_LABELS):
        raise ImageDataError(f"{path}: label_names is {names!r}, expected a list of 10 names")
    return [n.decode() if isinstance(n, bytes) else str(n) for n in names]


def _cifar_dir(root) -> Path:
    """The folder holding the batches: ``root`` itself or ``root/cifar-10-batches-py``."""
    root = Path(root)
    if (root / CIFAR10_DIRNAME).is_dir():
        return root / CIFAR10_DIRNAME
    if not root.is_dir():
        raise ImageDataError(
            f"{root}: no such folder (expected {CIFAR10_DIRNAME}/ from cifar-10-python.tar.gz, "
            f"https://www.cs.toronto.edu/~kriz/cifar.html, or the folder above it)"
        )
    return root


def _to_nhwc(data: np.ndarray) -> np.ndarray:
    """(n, 3072) planar rows → (n, 32, 32, 3) images."""
    s = CIFAR10_SIZE
    return np.ascontiguousarray(data.reshape(-1, 3, s, s).transpose(0, 2, 3, 1))


def read_cifar10(root) -> dict:
    """CIFAR-10 from ``root`` (``cifar-10-batches-py/`` or its parent): ``{"train": (images
    uint8 (50000, 32, 32, 3), labels int64), "test": (…), "labels": [10 names]}``."""
    folder = _cifar_dir(root)
    names = (*CIFAR10_TRAIN_BATCHES, CIFAR10_TEST_BATCH)
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise ImageDataError(
            f"{folder}: missing {', '.join(missing)} (partial download or extraction? the "
            f"CIFAR-10 python version has {', '.join(names)})"
        )
    train = [_read_batch(folder / n) for n in CIFAR10_TRAIN_BATCHES]
    test_data, test_labels = _read_batch(folder / CIFAR10_TEST_BATCH)
    return {
        "train": (
            _to_nhwc(np.concatenate([d for d, _ in train])),
            np.concatenate([y for _, y in train]),
        ),
        "test": (_to_nhwc(test_data), test_labels),
        "labels": _label_names(folder / CIFAR10_META),
    }


def _check_images(images, labels, c: int, size: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """uint8 (n, size, size[, c]) images and n int labels, as arrays."""
    images, labels = np.asarray(images), np.asarray(labels)
    shape = (size, size, c) if c > 1 else (size, size)
    if images.dtype != np.uint8 or images.shape[1:] != shape:
        raise ValueError(
            f"{what}: images {images.dtype} {images.shape}, expected uint8 "
            f"(n, {', '.join(map(str, shape))})"
        )
    if labels.shape != (len(images),) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{what}: labels {labels.dtype} {labels.shape} for {len(images)} images")
    return images, labels


def _dump_pickle(path: Path, obj: dict) -> None:
    """``pickle.dump(obj, protocol=2)`` to ``path`` (atomically: a temporary file, renamed)."""
    with atomic_file(path) as tmp, open(tmp, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def write_cifar10(
    root,
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    label_names: list[str] | None = None,
) -> Path:
    """Write (images uint8 (n, 32, 32, 3), labels) pairs in the CIFAR-10 python layout into
    ``root``: ``data_batch_1…5`` (the train images split as evenly as possible),
    ``test_batch`` and ``batches.meta``; returns ``root``."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    names = list(label_names) if label_names is not None else list(CIFAR10_LABELS)
    if len(names) != len(CIFAR10_LABELS):
        raise ValueError(f"{len(names)} label names, expected {len(CIFAR10_LABELS)}")
    x_train, y_train = _check_images(*train, 3, CIFAR10_SIZE, "train")
    x_test, y_test = _check_images(*test, 3, CIFAR10_SIZE, "test")
    n_batches = len(CIFAR10_TRAIN_BATCHES)
    parts = [
        (f"training batch {i + 1} of {n_batches}", name, x, y)
        for i, (name, x, y) in enumerate(
            zip(
                CIFAR10_TRAIN_BATCHES,
                np.array_split(x_train, n_batches),
                np.array_split(y_train, n_batches),
                strict=True,
            )
        )
    ]
    parts.append(("testing batch 1 of 1", CIFAR10_TEST_BATCH, x_test, y_test))
    start = 0
    for batch_label, name, x, y in parts:
        data = np.ascontiguousarray(x.transpose(0, 3, 1, 2).reshape(len(x), -1))
        _dump_pickle(
            root / name,
            {
                b"batch_label": batch_label.encode(),
                b"labels": [int(v) for v in y],
                b"data": data,
                b"filenames": [f"image_{start + i:05d}.png".encode() for i in range(len(x))],
            },
        )
        start += len(x)
    _dump_pickle(
        root / CIFAR10_META,
        {
            b"num_cases_per_batch": max(len(p[2]) for p in parts),
            b"label_names": [n.encode() for n in names],
            b"num_vis": 3 * CIFAR10_SIZE**2,
        },
    )
    return root


# ------------------------------------------------------------------------- Fashion-MNIST IDX

_IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_IDX_CODES = {np.dtype(t).newbyteorder("="): c for c, t in _IDX_TYPES.items()}


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped if it starts with the gzip magic (whatever its name)."""
    try:
        raw = path.read_bytes()
        return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    except (OSError, EOFError, zlib.error) as e:  # a truncated .gz: EOFError
        raise ImageDataError(f"{path}: unreadable or truncated ({type(e).__name__}: {e})") from e


def read_idx(path, ndim: int | None = None) -> np.ndarray:
    """The array in an IDX file (``.gz`` or not), in native byte order; ``ndim`` checks the
    number of dimensions the magic announces (3 for images, 1 for labels)."""
    path = Path(path)
    if not path.is_file():
        raise ImageDataError(f"{path}: no such file")
    buf = _read_bytes(path)
    if len(buf) < 4:
        raise ImageDataError(f"{path}: {len(buf)} bytes, too short for an IDX header")
    magic = struct.unpack(">I", buf[:4])[0]
    code, dims = buf[2], buf[3]
    if buf[:2] != b"\0\0" or code not in _IDX_TYPES or dims == 0:
        raise ImageDataError(
            f"{path}: bad IDX magic 0x{magic:08x} (expected 0x000008dd: uint8, dd dimensions)"
        )
    if ndim is not None and dims != ndim:
        raise ImageDataError(
            f"{path}: IDX magic 0x{magic:08x} announces {dims} dimensions, expected {ndim} "
            f"(0x{0x800 + ndim:08x})"
        )
    header = 4 + 4 * dims
    if len(buf) < header:
        raise ImageDataError(f"{path}: truncated IDX header ({len(buf)} of {header} bytes)")
    shape = struct.unpack(f">{dims}I", buf[4:header])
    dtype = np.dtype(_IDX_TYPES[code])
    need = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(buf) != need:
        what = "truncated" if len(buf) < need else "trailing bytes"
        raise ImageDataError(
            f"{path}: {what}: {len(buf)} bytes, shape {shape} of {dtype.name} needs {need}"
        )
    return np.frombuffer(buf, dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def write_idx(path, array: np.ndarray) -> Path:
    """Write ``array`` as an IDX file (gzip-compressed if the name ends with ``.gz``)."""
    path = Path(path)
    array = np.asarray(array)
    native = array.dtype.newbyteorder("=")
    if native not in _IDX_CODES or array.ndim == 0 or array.ndim > 255:
        raise ValueError(f"{array.dtype} array of {array.ndim} dims has no IDX encoding")
    data = struct.pack(f">BBBB{array.ndim}I", 0, 0, _IDX_CODES[native], array.ndim, *array.shape)
    data += np.ascontiguousarray(array, dtype=native.newbyteorder(">")).tobytes()
    if path.name.endswith(".gz"):
        out = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as f:
            f.write(data)
        data = out.getvalue()
    with atomic_file(path) as tmp:
        tmp.write_bytes(data)
    return path


def _idx_file(root: Path, stem: str) -> Path:
    """``root/stem.gz`` or ``root/stem``, whichever exists."""
    for name in (f"{stem}.gz", stem):
        if (root / name).is_file():
            return root / name
    raise ImageDataError(
        f"{root / stem}[.gz]: no such file (Fashion-MNIST: on Debian `apt install "
        f"dataset-fashion-mnist` installs it in {FASHION_MNIST_DIR}; or the files from "
        f"https://github.com/zalandoresearch/fashion-mnist)"
    )


def read_fashion_mnist(root=FASHION_MNIST_DIR) -> dict:
    """Fashion-MNIST from its IDX files: ``{"train": (images uint8 (60000, 28, 28), labels
    int64), "test": (10000 …), "labels": [10 class names]}``."""
    root = Path(root)
    out: dict = {"labels": list(FASHION_MNIST_LABELS)}
    for split, prefix in FASHION_MNIST_SPLITS.items():
        image_path = _idx_file(root, f"{prefix}-images-idx3-ubyte")
        label_path = _idx_file(root, f"{prefix}-labels-idx1-ubyte")
        images, labels = read_idx(image_path, ndim=3), read_idx(label_path, ndim=1)
        if images.dtype != np.uint8 or labels.dtype != np.uint8:
            raise ImageDataError(
                f"{image_path}, {label_path}: {images.dtype} images, "
                f"{labels.dtype} labels; expected uint8"
            )
        if len(images) != len(labels):
            raise ImageDataError(
                f"{label_path}: {len(labels)} labels for {len(images)} images in {image_path}"
            )
        if labels.size and labels.max() >= len(FASHION_MNIST_LABELS):
            i = int(np.argmax(labels >= len(FASHION_MNIST_LABELS)))
            raise ImageDataError(f"{label_path}: label {labels[i]} of image {i} outside 0…9")
        out[split] = (images, labels.astype(np.int64))
    return out


# ---------------------------------------------------------------------------- as sequences


def _pixels(images: np.ndarray, mode: str) -> np.ndarray:
    """uint8 images (n, H, W[, C]) → float32 (n, H·W, C') in [0, 1], raster order."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}, expected one of {MODES}")
    if images.dtype != np.uint8 or images.ndim not in (3, 4):
        raise ValueError(f"images {images.dtype} {images.shape}, expected uint8 (n, H, W[, C])")
    n, h, w = images.shape[:3]
    c = images.shape[3] if images.ndim == 4 else 1
    x = images.reshape(n, h * w, c).astype(np.float32) / np.float32(255)
    if mode == "gray" and c == 3:
        r, g, b = (np.float32(v) for v in GRAY_WEIGHTS)
        return (r * x[..., 0] + g * x[..., 1] + b * x[..., 2])[..., None]
    if (mode == "gray" and c != 1) or (mode == "rgb" and c != 3):
        raise ValueError(
            f"mode {mode!r} needs {'1 or 3' if mode == 'gray' else 3} channels, images have {c}"
        )
    return x


def channel_stats(images: np.ndarray, mode: str, chunk: int = 2048) -> tuple[list, list]:
    """Per-channel (mean, std) of :func:`image_sequences`' [0, 1] values, over all images and
    pixels, in chunks (no full float copy); a zero std is reported as 1."""
    images = np.asarray(images)
    total = total_sq = 0.0
    for i in range(0, len(images), chunk):
        x = _pixels(images[i : i + chunk], mode).astype(np.float64)
        total = total + x.sum(axis=(0, 1))
        total_sq = total_sq + np.square(x).sum(axis=(0, 1))
    count = images.size // (images.shape[3] if images.ndim == 4 else 1)
    if count == 0:
        raise ValueError("no images to compute statistics from")
    mean = np.asarray(total) / count
    std = np.sqrt(np.maximum(np.asarray(total_sq) / count - mean**2, 0.0))
    std[std == 0] = 1.0
    return mean.tolist(), std.tolist()


def _standardise(x: np.ndarray, mean, std) -> np.ndarray:
    mean_, std_ = np.asarray(mean, np.float32), np.asarray(std, np.float32)
    if mean_.shape != (x.shape[-1],) or std_.shape != (x.shape[-1],):
        raise ValueError(f"mean/std of {mean_.size}/{std_.size} values for {x.shape[-1]} channels")
    return (x - mean_) / std_


def image_sequences(
    images: np.ndarray, mode: str, mean=None, std=None
) -> tuple[np.ndarray, list, list]:
    """uint8 images (n, H, W[, C]) as float32 sequences (n, H·W, C'), raster order:
    ``"rgb"`` C' = 3, ``"gray"`` C' = 1 (0.299 R + 0.587 G + 0.114 B, or the single channel).
    Scaled to [0, 1], then standardised per channel with ``mean``/``std`` — computed from these
    images when not given; returned so that the train statistics serve val and test."""
    images = np.asarray(images)
    if mean is None or std is None:
        mean, std = channel_stats(images, mode)
    return _standardise(_pixels(images, mode), mean, std), list(mean), list(std)


def split_train_val(n: int, val_fraction: float = 0.1, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Deterministic disjoint (train_idx, val_idx), each sorted int64, ``round(n *
    val_fraction)`` indices held out for validation (S4 holds out 10 % of CIFAR's train set)."""
    if not 0 <= val_fraction < 1:
        raise ValueError(f"val_fraction {val_fraction} outside [0, 1)")
    perm = np.random.default_rng(seed).permutation(n)
    n_val = int(round(n * val_fraction))
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


class SequenceImageDataset(torch.utils.data.Dataset):
    """uint8 images and labels served as ``(x float32 (H·W, C'), y int)`` pairs, converted on
    the fly as :func:`image_sequences` converts them (equal to its rows); ``mean``/``std``
    default to these images' statistics (pass the train set's for val/test)."""

    def __init__(self, images: np.ndarray, labels, mode: str = "rgb", mean=None, std=None):
        self.images = np.asarray(images)
        labels = np.asarray(labels)
        if labels.shape != (len(self.images),):
            raise ValueError(f"{labels.size} labels for {len(self.images)} images")
        if mean is None or std is None:
            mean, std = channel_stats(self.images, mode)
        self.mode = mode
        self.mean, self.std = list(mean), list(std)
        self.targets = [int(v) for v in labels]
        sample = _pixels(self.images[:1], mode)
        _standardise(sample, self.mean, self.std)  # checks mode, shapes and mean/std now
        self.seq_len, self.channels = sample.shape[1:]

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x = _standardise(_pixels(self.images[i][None], self.mode), self.mean, self.std)
        return torch.from_numpy(x[0]), self.targets[i]


__all__ = [
    "CIFAR10_LABELS",
    "FASHION_MNIST_DIR",
    "FASHION_MNIST_LABELS",
    "ImageDataError",
    "SequenceImageDataset",
    "channel_stats",
    "image_sequences",
    "read_cifar10",
    "read_fashion_mnist",
    "read_idx",
    "split_train_val",
    "write_cifar10",
    "write_idx",
]
