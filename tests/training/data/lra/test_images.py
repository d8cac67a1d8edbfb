"""Image sets as sequences: CIFAR-10 python batches (restricted unpickling) and Fashion-MNIST
IDX files — written in the real formats, read back, malformed files refused clearly."""

from __future__ import annotations

import gzip
import os
import pickle
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from liquid_stream.training.data.lra import images as im


def cifar_fixture(root, n_train: int = 7, n_test: int = 6, seed: int = 0):
    rng = np.random.default_rng(seed)
    train = (
        rng.integers(0, 256, (n_train, 32, 32, 3), dtype=np.uint8),
        rng.integers(0, 10, n_train),
    )
    test = (rng.integers(0, 256, (n_test, 32, 32, 3), dtype=np.uint8), rng.integers(0, 10, n_test))
    im.write_cifar10(root, train, test)
    return train, test


def load_raw(path) -> dict:
    with open(path, "rb") as f:
        return pickle.load(f, encoding="bytes")


def dump_raw(path, obj) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def test_cifar_round_trip_in_the_real_layout(tmp_path):
    root = tmp_path / "cifar-10-batches-py"
    names = [f"c{i}" for i in range(10)]
    train, test = cifar_fixture(root)
    im.write_cifar10(root, train, test, label_names=names)
    files = sorted(p.name for p in root.iterdir())
    assert files == ["batches.meta", *(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]
    sizes = [len(load_raw(root / f"data_batch_{i}")[b"labels"]) for i in range(1, 6)]
    assert sizes == [2, 2, 1, 1, 1]  # 7 images over 5 batches, as even as possible
    raw = load_raw(root / "test_batch")
    assert raw[b"data"].shape == (6, 3072) and raw[b"data"].dtype == np.uint8
    assert load_raw(root / "batches.meta")[b"label_names"] == [n.encode() for n in names]
    for where in (root, tmp_path):  # the batches folder, or the folder above it
        data = im.read_cifar10(where)
        for split, (x, y) in (("train", train), ("test", test)):
            assert data[split][0].dtype == np.uint8 and data[split][1].dtype == np.int64
            np.testing.assert_array_equal(data[split][0], x)
            np.testing.assert_array_equal(data[split][1], y)
        assert data["labels"] == names
    (root / "batches.meta").unlink()
    assert im.read_cifar10(root)["labels"] == list(im.CIFAR10_LABELS)


def test_cifar_planes_map_to_raster_position_and_channel(tmp_path):
    """A hand-built batch (not via write_cifar10): red byte at (r, c), green at (r2, c2)."""
    cifar_fixture(tmp_path)
    r, c, r2, c2 = 3, 17, 30, 1
    data = np.zeros((2, 3072), np.uint8)
    data[1, r * 32 + c] = 200  # red plane
    data[1, 1024 + r2 * 32 + c2] = 100  # green plane
    data[0, 2048 + 5] = 50  # blue plane, row 0 col 5
    dump_raw(
        tmp_path / "data_batch_1",
        {b"batch_label": b"x", b"labels": [4, 2], b"data": data, b"filenames": [b"a", b"b"]},
    )
    x, y = im.read_cifar10(tmp_path)["train"]
    assert y[:2].tolist() == [4, 2]
    assert x[1, r, c].tolist() == [200, 0, 0] and x[1, r2, c2].tolist() == [0, 100, 0]
    assert x[0, 0, 5].tolist() == [0, 0, 50]
    seq, _, _ = im.image_sequences(x[:2], "rgb", mean=[0, 0, 0], std=[1, 1, 1])
    assert seq.shape == (2, 1024, 3) and seq.dtype == np.float32
    assert seq[1, r * 32 + c, 0] == np.float32(200 / 255)
    assert seq[1, r2 * 32 + c2, 1] == np.float32(100 / 255)
    assert seq[0, 5, 2] == np.float32(50 / 255)
    assert np.count_nonzero(seq) == 3


def test_numpy1_module_name_loads(tmp_path):
    """numpy 1.x (and the original Python 2 files) name numpy.core.multiarray._reconstruct."""
    train, test = cifar_fixture(tmp_path)
    path = tmp_path / "test_batch"
    blob = path.read_bytes()
    assert b"numpy._core.multiarray\n_reconstruct" in blob  # what numpy 2 writes
    path.write_bytes(blob.replace(b"numpy._core.multiarray\n", b"numpy.core.multiarray\n"))
    np.testing.assert_array_equal(im.read_cifar10(tmp_path)["test"][0], test[0])


def test_gray_formula_and_standardisation_with_train_stats():
    img = np.zeros((1, 2, 2, 3), np.uint8)
    img[0, 1, 0] = (10, 200, 30)
    gray, _, _ = im.image_sequences(img, "gray", mean=[0.0], std=[1.0])
    assert gray.shape == (1, 4, 1)
    assert gray[0, 2, 0] == pytest.approx((0.299 * 10 + 0.587 * 200 + 0.114 * 30) / 255, abs=1e-6)
    assert gray[0, [0, 1, 3], 0].tolist() == [0, 0, 0]
    one = np.arange(8, dtype=np.uint8).reshape(2, 2, 2) * 30  # single channel: identity
    np.testing.assert_allclose(
        im.image_sequences(one, "gray", [0], [1])[0][..., 0], one.reshape(2, 4) / 255, atol=1e-7
    )

    rng = np.random.default_rng(1)
    train = rng.integers(0, 256, (20, 8, 8, 3), dtype=np.uint8)
    val = rng.integers(0, 128, (5, 8, 8, 3), dtype=np.uint8)  # darker: different stats
    xt, mean, std = im.image_sequences(train, "rgb")
    assert len(mean) == len(std) == 3
    np.testing.assert_allclose(xt.mean(axis=(0, 1)), 0, atol=1e-5)
    np.testing.assert_allclose(xt.std(axis=(0, 1)), 1, atol=1e-4)
    flat = train.reshape(-1, 3) / 255
    np.testing.assert_allclose(mean, flat.mean(0), rtol=1e-6)
    np.testing.assert_allclose(std, flat.std(0), rtol=1e-6)
    xv, mean_v, std_v = im.image_sequences(val, "rgb", mean, std)
    assert (mean_v, std_v) == (mean, std)
    np.testing.assert_allclose(xv, (val.reshape(5, 64, 3) / 255 - mean) / std, atol=1e-5)
    assert xv.mean() < -0.5  # the val set is darker than the train statistics say
    with pytest.raises(ValueError, match="channels"):
        im.image_sequences(train[..., 0], "rgb")


def test_split_train_val_is_deterministic_and_disjoint():
    tr, va = im.split_train_val(50000)
    assert (len(tr), len(va)) == (45000, 5000)
    assert np.array_equal(np.sort(np.concatenate([tr, va])), np.arange(50000))
    tr2, va2 = im.split_train_val(50000)
    assert np.array_equal(va, va2) and np.array_equal(tr, tr2)
    assert not np.array_equal(va, im.split_train_val(50000, seed=1)[1])
    assert len(im.split_train_val(10, 0.3)[1]) == 3


def test_dataset_items_equal_image_sequences_rows():
    rng = np.random.default_rng(2)
    images = rng.integers(0, 256, (9, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, 9)
    for mode, c in (("rgb", 3), ("gray", 1)):
        seq, mean, std = im.image_sequences(images, mode)
        ds = im.SequenceImageDataset(images, labels, mode)
        assert (ds.mean, ds.std) == (mean, std) and (ds.seq_len, ds.channels) == (1024, c)
        assert ds.targets == labels.tolist() and len(ds) == 9
        for i in (0, 4, 8, -1):
            x, y = ds[i]
            assert x.dtype == torch.float32 and x.shape == (1024, c) and isinstance(y, int)
            assert torch.equal(x, torch.from_numpy(seq[i])) and y == labels[i]
    fm = rng.integers(0, 256, (4, 28, 28), dtype=np.uint8)  # Fashion-MNIST shaped
    ds = im.SequenceImageDataset(fm, [1, 2, 3, 4], "gray", mean=[0.3], std=[0.35])
    torch.testing.assert_close(
        ds[2][0], torch.from_numpy((fm[2].reshape(784, 1) / 255 - 0.3) / 0.35).float()
    )


def _corrupt(root: Path, name: str, how: str) -> None:
    path = root / name
    if how == "missing":
        path.unlink()
    elif how == "truncated":
        blob = path.read_bytes()
        path.write_bytes(blob[: len(blob) // 2])
    elif how == "garbage":
        path.write_bytes(b"\x80\x02this is not a pickle")
    else:
        batch = load_raw(path)
        n = len(batch[b"labels"])
        if how == "shape":
            batch[b"data"] = np.zeros((n, 1024), np.uint8)
        elif how == "dtype":
            batch[b"data"] = batch[b"data"].astype(np.float32)
        elif how == "keys":
            batch[b"images"] = batch.pop(b"data")
        elif how == "count":
            batch[b"labels"] = batch[b"labels"][:-1]
        elif how == "range":
            batch[b"labels"][0] = 10
        elif how == "list":
            batch = [batch]
        dump_raw(path, batch)


@pytest.mark.parametrize(
    "name,how,match",
    [
        ("data_batch_3", "missing", "missing data_batch_3 .*partial download"),
        ("test_batch", "missing", "missing test_batch"),
        ("data_batch_2", "truncated", "data_batch_2: truncated or corrupt pickle"),
        ("test_batch", "garbage", "test_batch: truncated or corrupt pickle"),
        ("data_batch_1", "shape", r"data_batch_1: data is uint8 \(2, 1024\), expected"),
        ("data_batch_1", "dtype", "data_batch_1: data is float32"),
        ("data_batch_4", "keys", "data_batch_4: no key data"),
        ("data_batch_5", "count", "data_batch_5: 0 labels for 1 images"),
        ("test_batch", "range", "test_batch: label 10 of image 0 outside"),
        ("test_batch", "list", "test_batch: pickle holds a list"),
        ("batches.meta", "truncated", "batches.meta: truncated"),
    ],
)
def test_bad_cifar_files_raise_clear_errors(tmp_path, name, how, match):
    cifar_fixture(tmp_path)
    _corrupt(tmp_path, name, how)
    with pytest.raises(im.ImageDataError, match=match):
        im.read_cifar10(tmp_path)


def test_missing_cifar_folder(tmp_path):
    with pytest.raises(im.ImageDataError, match="nowhere: no such folder.*cifar-10-batches-py"):
        im.read_cifar10(tmp_path / "nowhere")


class _Evil:
    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


@pytest.mark.parametrize("payload", ["system", "inside-batch"])
def test_malicious_pickle_is_refused_without_running(tmp_path, payload):
    cifar_fixture(tmp_path)
    marker = tmp_path / "pwned"
    evil = _Evil(f"touch {marker}")
    if payload == "system":
        obj = evil
    else:  # hidden inside an otherwise plausible batch
        obj = load_raw(tmp_path / "data_batch_2")
        obj[b"batch_label"] = evil
    dump_raw(tmp_path / "data_batch_2", obj)
    with pytest.raises(im.ImageDataError, match=r"data_batch_2: forbidden global (posix|os)\."):
        im.read_cifar10(tmp_path)
    assert not marker.exists()
    pickle.loads(pickle.dumps(evil))  # the payload does run when unpickled normally
    assert marker.exists()


# ----------------------------------------------------------------------------- Fashion-MNIST


def fashion_fixture(root: Path, gz: bool, n_train: int = 12, n_test: int = 5, seed: int = 0):
    rng = np.random.default_rng(seed)
    ext = ".gz" if gz else ""
    out = {}
    for split, prefix, n in (("train", "train", n_train), ("test", "t10k", n_test)):
        x = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        y = rng.integers(0, 10, n).astype(np.uint8)
        im.write_idx(root / f"{prefix}-images-idx3-ubyte{ext}", x)
        im.write_idx(root / f"{prefix}-labels-idx1-ubyte{ext}", y)
        out[split] = (x, y)
    return out


@pytest.mark.parametrize("gz", [True, False])
def test_idx_round_trip(tmp_path, gz):
    data = fashion_fixture(tmp_path, gz)
    raw = tmp_path / ("t10k-labels-idx1-ubyte" + (".gz" if gz else ""))
    blob = gzip.decompress(raw.read_bytes()) if gz else raw.read_bytes()
    assert blob[:8] == bytes([0, 0, 8, 1, 0, 0, 0, 5])  # magic 0x00000801, then 5 big-endian
    loaded = im.read_fashion_mnist(tmp_path)
    assert loaded["labels"][0] == "T-shirt/top" and loaded["labels"][9] == "Ankle boot"
    for split in ("train", "test"):
        np.testing.assert_array_equal(loaded[split][0], data[split][0])
        np.testing.assert_array_equal(loaded[split][1], data[split][1])
        assert loaded[split][1].dtype == np.int64
    wide = np.arange(-6, 6, dtype=np.int32).reshape(3, 4) * 1000  # multi-byte: big-endian
    im.write_idx(tmp_path / "w.idx", wide)
    assert (tmp_path / "w.idx").read_bytes()[:4] == bytes([0, 0, 0x0C, 2])
    np.testing.assert_array_equal(im.read_idx(tmp_path / "w.idx"), wide)


@pytest.mark.parametrize(
    "gz,how,match",
    [
        (False, "cut", r"train-images-idx3-ubyte: truncated: .* needs 9424"),
        (True, "cut", r"train-images-idx3-ubyte.gz: unreadable or truncated \(EOFError"),
        (False, "magic", "bad IDX magic 0x00000f03"),
        (False, "dims", r"announces 2 dimensions, expected 3 \(0x00000803\)"),
        (True, "count", "11 labels for 12 images"),
        (False, "label", "t10k-labels-idx1-ubyte: label 10 of image 0 outside"),
        (True, "missing", "t10k-images-idx3-ubyte.*no such file.*dataset-fashion-mnist"),
    ],
)
def test_bad_idx_files_raise_clear_errors(tmp_path, gz, how, match):
    data = fashion_fixture(tmp_path, gz)
    ext = ".gz" if gz else ""
    images = tmp_path / f"train-images-idx3-ubyte{ext}"
    if how == "cut":
        images.write_bytes(images.read_bytes()[:-50])
    elif how == "magic":
        images.write_bytes(b"\0\0\x0f\x03" + images.read_bytes()[4:])
    elif how == "dims":
        im.write_idx(images, data["train"][0].reshape(12, 784))
    elif how == "count":
        im.write_idx(tmp_path / f"train-labels-idx1-ubyte{ext}", data["train"][1][:11])
    elif how == "label":
        y = data["test"][1].copy()
        y[0] = 10
        im.write_idx(tmp_path / f"t10k-labels-idx1-ubyte{ext}", y)
    elif how == "missing":
        (tmp_path / f"t10k-images-idx3-ubyte{ext}").unlink()
    with pytest.raises(im.ImageDataError, match=match):
        im.read_fashion_mnist(tmp_path)


@pytest.mark.skipif(
    not Path(im.FASHION_MNIST_DIR).is_dir(),
    reason=f"{im.FASHION_MNIST_DIR} missing (Debian package dataset-fashion-mnist)",
)
def test_real_fashion_mnist_loads():
    t = time.perf_counter()
    data = im.read_fashion_mnist()
    elapsed = time.perf_counter() - t
    (x, y), (xt, yt) = data["train"], data["test"]
    assert x.shape == (60000, 28, 28) and xt.shape == (10000, 28, 28) and x.dtype == np.uint8
    assert y.shape == (60000,) and yt.shape == (10000,)
    assert np.bincount(y, minlength=10).tolist() == [6000] * 10
    assert np.bincount(yt, minlength=10).tolist() == [1000] * 10
    assert 0.2 < x.mean() / 255 < 0.4 and 0.2 < xt.mean() / 255 < 0.4
    assert elapsed < 10, elapsed
