"""Pathfinder / Path-X (LRA): generator → PNG + metadata layout → loader; the labels are
re-derived from the pixels, without the generator's bookkeeping."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage
from scipy.sparse.csgraph import shortest_path
from scipy.spatial import cKDTree

from liquid_stream.training.data.lra import pathfinder as pf

DIFF = "curv_contour_length_14"


def mask_ends(mask: np.ndarray, link: float) -> tuple[np.ndarray, np.ndarray]:
    """The two ends (2, 2) of a dashed curve given as a pixel mask, and its pixel centres
    (x, y): pixels closer than ``link`` are neighbours (bridging the gaps); the ends are found
    by a double sweep of geodesic distances (farthest from any pixel, then farthest from it)."""
    xy = np.argwhere(mask)[:, ::-1] + 0.5
    tree = cKDTree(xy)
    graph = tree.sparse_distance_matrix(tree, link, output_type="coo_matrix").tocsr()
    e1 = int(np.argmax(shortest_path(graph, indices=0)))
    d1 = shortest_path(graph, indices=e1)
    assert np.isfinite(d1).all(), "a path's pixels fall apart"
    return xy[[e1, int(np.argmax(d1))]], xy


def link(resolution: int) -> float:
    """Neighbour distance that bridges a gap between dashes (1 px at 32×32, 4 px at 128×128)."""
    return resolution / 32 + 1


def dot_owners(info: dict, resolution: int) -> list[int]:
    """For each dot, the one path that has a pixel end at the dot (within ~1 px); checks that
    no other path touches the dot."""
    tol = radius = 1.5 * np.sqrt(resolution / 32)
    ends = [mask_ends(m, link(resolution)) for m in info["masks"]]
    owners = []
    for dot in info["dots"]:
        near = [j for j, (e, _) in enumerate(ends) if np.hypot(*(e - dot).T).min() <= tol]
        assert len(near) == 1, f"dot {dot} ends paths {near}"
        owners.append(near[0])
        for j, (_, xy) in enumerate(ends):
            if j != near[0]:
                assert np.hypot(*(xy - dot).T).min() >= radius, f"path {j} touches dot {dot}"
    return owners


def test_images_shape_dtype_and_determinism():
    for res in (32, 128):
        a = pf.generate_image(np.random.default_rng(3), res, 1)
        b = pf.generate_image(np.random.default_rng(3), res, 1)
        c = pf.generate_image(np.random.default_rng(4), res, 1)
        assert a.shape == (res, res) and a.dtype == np.uint8
        assert np.array_equal(a, b) and not np.array_equal(a, c)
        assert a.max() == 255 and a.min() == 0
    with pytest.raises(ValueError, match="label"):
        pf.generate_image(np.random.default_rng(0), 32, 2)


@pytest.mark.parametrize("res,n", [(32, 40), (128, 6)])
def test_label_is_connectivity_of_the_pixel_paths(res, n):
    """From each path's own pixels: both dots end one path (label 1) or two (label 0), no
    other path touches a dot, and the image is exactly those paths and the two dots."""
    radius = pf.DOT_RADIUS * np.sqrt(res / 32)
    yy, xx = np.mgrid[:res, :res] + 0.5
    for label in (0, 1):
        rng = np.random.default_rng([11, label])
        for _ in range(n):
            img, info = pf.generate_image(rng, res, label, return_info=True)
            assert info["masks"].shape == (4, res, res)  # 2 + 2 distractors, all 14 paddles
            assert info["paths"].shape == (4, 14, 2, 2)
            owners = dot_owners(info, res)
            assert int(owners[0] == owners[1]) == label
            if label:  # the two different ends of that path
                e, _ = mask_ends(info["masks"][owners[0]], link(res))
                d = np.hypot(*(e[:, None] - info["dots"][None]).transpose(2, 0, 1))
                assert min(d[0, 0] + d[1, 1], d[0, 1] + d[1, 0]) <= 2 * radius
            near_dot = np.zeros((res, res), bool)
            for x, y in info["dots"]:
                assert img[int(y), int(x)] == 255
                near_dot |= np.hypot(xx - x, yy - y) <= radius + 1
            union = info["masks"].any(0)
            assert (img[union] > 0).all()
            assert not (img > 0)[~union & ~near_dot].any()


def test_flood_fill_joins_the_dots_of_positives_only():
    """At 128×128 the dashes can be closed (a dilation bridging the 4-px gaps): the dots of a
    positive are then always in one blob. Paths cross, as in LRA: with the default two
    distractors nearly every image is one blob, so this runs without distractors. A negative
    is then joined only where its two paths (with their dots) meet — about 90 % of them, as
    the decoy path runs towards the first dot — and never otherwise."""
    disk = np.hypot(*np.mgrid[-2:3, -2:3]) <= 2.9
    cross = ndimage.generate_binary_structure(2, 1)
    yy, xx = np.mgrid[:128, :128] + 0.5
    radius = pf.DOT_RADIUS * 2
    joined = {0: [], 1: []}
    for label in (0, 1):
        rng = np.random.default_rng([21, label])
        for _ in range(60):
            img, info = pf.generate_image(rng, 128, label, n_distractors=0, return_info=True)
            blobs, _ = ndimage.label(ndimage.binary_dilation(img >= 128, disk))
            (x1, y1), (x2, y2) = info["dots"].astype(int)
            joined[label].append(blobs[y1, x1] == blobs[y2, x2] != 0)
            if label == 0 and joined[0][-1]:  # then path A (dot 1) and path B (dot 2) meet
                a, b = (
                    ndimage.binary_dilation(m | (np.hypot(xx - x, yy - y) <= radius + 1), disk)
                    for m, (x, y) in zip(info["masks"], info["dots"], strict=True)
                )
                assert (ndimage.binary_dilation(a, cross) & b).any()
    assert all(joined[1]) and not all(joined[0])


def test_statistics_do_not_reveal_the_label():
    """Mean ink and dot distance of 200 images per class at 32×32 (measured: ink within
    0.5 %, dot distance within 3 %)."""
    ink, dist = {}, {}
    for label in (0, 1):
        rng = np.random.default_rng([31, label])
        ii, dd = [], []
        for _ in range(200):
            img, info = pf.generate_image(rng, 32, label, return_info=True)
            ii.append(img.sum(dtype=np.int64))
            dd.append(np.hypot(*(info["dots"][0] - info["dots"][1])))
        ink[label], dist[label] = np.mean(ii), np.mean(dd)
    assert abs(ink[1] - ink[0]) / ink[0] < 0.02
    assert abs(dist[1] - dist[0]) / dist[0] < 0.08


def test_write_read_round_trip(tmp_path):
    root = pf.write_dataset(tmp_path / "pf", 10, resolution=32, seed=5, per_batch=4)
    assert root == tmp_path / "pf"
    base = root / DIFF
    assert sorted(p.name for p in (base / "metadata").iterdir()) == ["0.npy", "1.npy", "2.npy"]
    lines = (base / "metadata" / "1.npy").read_text().splitlines()
    assert lines[0].split() == ["imgs/1", "sample_0.png", "0", lines[0].split()[3], "14", "2", "2"]
    for k, size in ((0, 4), (1, 4), (2, 2)):  # every batch folder exactly balanced
        labels = [int(ln.split()[3]) for ln in (base / "metadata" / f"{k}.npy").open()]
        assert len(labels) == size and sum(labels) == size // 2
    images, labels = pf.read_dataset(root, resolution=32)
    assert images.shape == (10, 32, 32) and images.dtype == np.uint8 and labels.dtype == np.int64
    assert np.array_equal(labels, pf.balanced_labels(10, 5))
    for i in range(10):
        rng = pf.image_rng(5, i)
        assert np.array_equal(images[i], pf.generate_image(rng, 32, int(labels[i])))
    with Image.open(base / "imgs" / "2" / "sample_1.png") as im:
        assert im.mode == "L" and im.size == (32, 32)
    # the same set whatever the batch size and the number of worker processes
    other = pf.write_dataset(tmp_path / "pf2", 10, seed=5, per_batch=2, workers=2)
    assert all(
        np.array_equal(a, b) for a, b in zip(pf.read_dataset(other), (images, labels), strict=True)
    )


def test_round_trip_path_x_and_other_difficulty(tmp_path):
    pf.write_dataset(tmp_path, 4, resolution=128, seed=2, per_batch=2)
    images, labels = pf.read_dataset(tmp_path, resolution=128)
    assert images.shape == (4, 128, 128) and sorted(labels.tolist()) == [0, 0, 1, 1]
    rng = pf.image_rng(2, 3)
    assert np.array_equal(images[3], pf.generate_image(rng, 128, int(labels[3])))
    pf.write_dataset(tmp_path, 2, seed=2, difficulty="curv_baseline", progress=True)
    line = (tmp_path / "curv_baseline" / "metadata" / "0.npy").read_text().split()
    assert line[4:7] == ["6", "2", str(pf.default_distractors(6))]
    assert pf.read_dataset(tmp_path, "curv_baseline")[0].shape == (2, 32, 32)
    assert pf.contour_length_of("curv_contour_length_9") == 9
    with pytest.raises(ValueError, match="unknown difficulty"):
        pf.contour_length_of("hard")


def _break(base, what: str):
    """Damage a written set; return the path the error must name."""
    png = base / "imgs" / "1" / "sample_1.png"
    meta = base / "metadata" / "1.npy"
    if what == "truncated":
        png.write_bytes(png.read_bytes()[:60])
    elif what == "garbage":
        png.write_bytes(b"not a png at all")
    elif what == "rgb":
        Image.new("RGB", (32, 32)).save(png)
    elif what == "size":
        Image.new("L", (16, 16)).save(png)
    elif what == "missing image":
        png.unlink()
    elif what in ("label", "fields", "index"):
        bad = {
            "label": "imgs/1 sample_1.png 1 2 14 2 2",
            "fields": "imgs/1 sample_1.png 1",
            "index": "imgs/1 sample_1.png x 1 14 2 2",
        }[what]
        first = meta.read_text().splitlines()[0]
        meta.write_text(f"{first}\n{bad}\n")
        return f"{meta}:2"
    return png


@pytest.mark.parametrize(
    "what,match",
    [
        ("truncated", "unreadable PNG"),
        ("garbage", "unreadable PNG"),
        ("rgb", "mode 'RGB'"),
        ("size", "size 16×16"),
        ("missing image", "no such image"),
        ("label", "label '2' is not 0 or 1"),
        ("fields", "3 fields"),
        ("index", "index 'x'"),
    ],
)
def test_bad_files_raise_clear_errors(tmp_path, what, match):
    pf.write_dataset(tmp_path, 4, seed=1, per_batch=2)
    where = _break(tmp_path / DIFF, what)
    with pytest.raises(pf.PathfinderDataError, match=match) as e:
        pf.read_dataset(tmp_path)
    assert str(where) in str(e.value)


def test_bad_layouts_raise_clear_errors(tmp_path):
    with pytest.raises(pf.PathfinderDataError, match="no such folder"):
        pf.read_dataset(tmp_path / "nope")
    pf.write_dataset(tmp_path, 4, seed=1, per_batch=2)
    with pytest.raises(pf.PathfinderDataError, match=r"expected 64×64"):
        pf.read_dataset(tmp_path, resolution=64)
    with pytest.raises(pf.PathfinderDataError, match=r"no such difficulty folder.*curv_contour"):
        pf.read_dataset(tmp_path, "curv_contour_length_9")
    meta = tmp_path / DIFF / "metadata"
    for f in meta.iterdir():
        f.unlink()
    with pytest.raises(pf.PathfinderDataError, match="no metadata files") as e:
        pf.read_dataset(tmp_path)
    assert str(meta) in str(e.value)
    meta.rmdir()
    with pytest.raises(pf.PathfinderDataError, match="no metadata folder"):
        pf.read_dataset(tmp_path)


def test_generated_set_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("LIQUID_STREAM_CACHE", str(tmp_path))
    root = pf.ensure_pathfinder(6, 32, seed=1, per_batch=2)
    assert root == tmp_path / f"pathfinder32-6-{DIFF}-1"
    images, labels = pf.read_dataset(root, resolution=32)
    assert images.shape == (6, 32, 32) and labels.sum() == 3

    def rebuild(*args, **kwargs):
        raise AssertionError("rebuilt a cached set")

    monkeypatch.setattr(pf, "write_dataset", rebuild)
    assert pf.ensure_pathfinder(6, 32, seed=1, per_batch=2) == root
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("pathfinder")] == [root.name]


def test_split_indices():
    train, val, test = pf.split_indices(1000, seed=3)
    assert (len(train), len(val), len(test)) == (800, 100, 100)
    assert np.array_equal(np.sort(np.concatenate([train, val, test])), np.arange(1000))
    again = pf.split_indices(1000, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(again, (train, val, test), strict=True))
    assert not np.array_equal(pf.split_indices(1000, seed=4)[0], train)
    assert [len(s) for s in pf.split_indices(7, val=0.2, test=0.0)] == [6, 1, 0]


def test_data_cli_writes_a_readable_set(tmp_path):
    from click.testing import CliRunner

    from liquid_stream.cli import main

    res = CliRunner().invoke(
        main,
        [
            "data",
            "pathfinder",
            str(tmp_path),
            "--images",
            "6",
            "--difficulty",
            "curv_baseline",
            "--seed",
            "2",
        ],
    )
    assert res.exit_code == 0, res.output
    images, labels = pf.read_dataset(tmp_path, "curv_baseline", resolution=32)
    assert images.shape == (6, 32, 32) and sorted(labels.tolist()) == [0, 0, 0, 1, 1, 1]
