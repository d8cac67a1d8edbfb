"""Pathfinder / Path-X (Long Range Arena): a generator, the LRA on-disk layout and a loader.

A Pathfinder image (Linsley et al. 2018; LRA: 32×32, sequence length 1024; Path-X: 128×128,
length 16384) shows two dots and several curvy dashed paths. Label 1: the dots are the two
ends of one path; label 0: they sit at ends of two different paths.

A path is a chain of ``contour_length`` paddles (straight dashes of length ℓ) with gaps g
between them; paddle i has direction θ_i, θ_{i+1} = θ_i + δ_i with δ_i uniform in
[−TURN, TURN] (bounded curvature), and the gap after paddle i points along (θ_i + θ_{i+1})/2.
Shapes that leave the image, come back near themselves (midpoints of paddles i, j ≥ i + 2
closer than ℓ + g + thickness) or whose ends are closer than min(3 (ℓ + g), arc length / 2)
are redrawn.
Lengths are in units of a 32×32 image scaled by s = R/32 (ℓ = 2 s, g = s, TURN = 45°);
thickness and dot radius scale with √s so that Path-X lines stay thin (1 px and 1.5 px at 32,
2 px and 3 px at 128).

Every image has 2 + ``n_distractors`` paths of the same length, drawn the same way for both
labels, so that only connectivity tells them apart:

* path A, with a dot at its start P1; d = |A_end − P1|;
* path B, the decoy, whose end P3 sits at the same distance d from P1 (direction random) and
  whose last paddle makes the same angle (up to sign) with P3 − P1 as A's last paddle with
  A_end − P1;
* the distractors, placed at random.

The candidate dot sites P1, P2 = A_end and P3 keep a clearance (dot radius + half thickness
+ g) from every paddle of the other paths. The second dot goes on P2 (label 1) or on P3
(label 0); everything else — number, length and layout of the paths — has the same
distribution for both labels. Paths may cross, as in the original.

Drawing is antialiased analytically: a pixel's intensity is clip(0.5 − sdf, 0, 1), sdf the
signed distance of its centre to the nearest paddle (a box) or dot (a disc); white on black,
8 bits. Coordinates are (x, y) = (column, row) with pixel (i, j) centred at (j + ½, i + ½).

On disk (what LRA ships and the S4 / LRA loaders read)::

    <root>/<difficulty>/imgs/<k>/sample_<i>.png   8-bit grayscale PNG, R×R
    <root>/<difficulty>/metadata/<k>.npy          a TEXT file despite the suffix, one line
        per image: imgs/<k> sample_<i>.png <i> <label> <contour_length> <paddle_length>
        <n_distractors>                           (loaders use fields 0, 1 and 3)

``difficulty`` is ``curv_baseline`` (6 paddles), ``curv_contour_length_9`` or
``curv_contour_length_14`` (LRA). Models read an image row-major as R² steps of one value,
(x / 255 − PIXEL_MEAN) / PIXEL_STD ∈ [−1, 1] (the S4 code's scaling; the ``pathfinder`` task
feeds it through ``images.SequenceImageDataset``), split 80/10/10 at random (:func:`split_indices`).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from .. import cache

DIFFICULTIES = {"curv_baseline": 6, "curv_contour_length_9": 9, "curv_contour_length_14": 14}
PADDLE = 2.0  # paddle length, in px of a 32×32 image (× R/32)
GAP = 1.0  # gap between paddles (× R/32)
THICKNESS = 1.0  # line width at 32×32 (× √(R/32))
DOT_RADIUS = 1.5  # (× √(R/32))
PIXEL_MEAN = PIXEL_STD = 0.5  # model input (x / 255 − 0.5) / 0.5: fixed, not train statistics
TURN = np.pi / 4  # largest change of direction from one paddle to the next
_TRIES = 64  # random shapes drawn at once (a fraction of them valid)


class PathfinderDataError(ValueError):
    """A Pathfinder file is missing or malformed (the message names the file, and the line)."""


def contour_length_of(difficulty: str) -> int:
    """Paddles per path of an LRA difficulty folder name (``curv_contour_length_<n>``)."""
    if difficulty in DIFFICULTIES:
        return DIFFICULTIES[difficulty]
    m = re.fullmatch(r"curv_contour_length_(\d+)", difficulty)
    if not m:
        raise ValueError(f"unknown difficulty {difficulty!r} (e.g. {', '.join(DIFFICULTIES)})")
    return int(m.group(1))


def default_distractors(contour_length: int) -> int:
    """Paths without a possible dot: about the same total ink for every contour length."""
    return max(1, round(28 / contour_length))


class _Geometry:
    """Lengths at resolution R (see the module docstring)."""

    def __init__(self, resolution: int, contour_length: int):
        s = resolution / 32
        self.R, self.n = resolution, contour_length
        self.paddle, self.gap = PADDLE * s, GAP * s
        self.half = THICKNESS * np.sqrt(s) / 2  # half thickness
        self.dot = DOT_RADIUS * np.sqrt(s)
        self.margin = self.dot + 0.25  # from the image border
        self.clearance = self.dot + self.half + self.gap  # from a dot site to other paths
        self.self_dist = self.paddle + self.gap + 2 * self.half
        arc = contour_length * self.paddle + (contour_length - 1) * self.gap
        self.min_chord = min(3 * (self.paddle + self.gap), arc / 2)


def _shapes(rng: np.random.Generator, g: _Geometry, k: int) -> np.ndarray:
    """The valid ones among ``k`` random path shapes: complex (m, n, 2), paddle i from
    [:, i, 0] to [:, i, 1] (x + iy), starting at 0."""
    n = g.n
    theta0 = rng.uniform(0, 2 * np.pi, (k, 1))
    turns = rng.uniform(-TURN, TURN, (k, n - 1))
    theta = theta0 + np.concatenate([np.zeros((k, 1)), np.cumsum(turns, axis=1)], axis=1)
    steps = np.empty((k, 2 * n - 1), dtype=complex)
    steps[:, 0::2] = g.paddle * np.exp(1j * theta)
    steps[:, 1::2] = g.gap * np.exp(0.5j * (theta[:, :-1] + theta[:, 1:]))
    pts = np.concatenate([np.zeros((k, 1)), np.cumsum(steps, axis=1)], axis=1)
    room = g.R - 2 * g.margin
    ok = (np.ptp(pts.real, 1) <= room) & (np.ptp(pts.imag, 1) <= room)
    ok &= np.abs(pts[:, -1]) >= g.min_chord
    pts = pts[ok]
    mids = (pts[:, 0::2] + pts[:, 1::2]) / 2
    i, j = np.triu_indices(n, 2)  # paddle pairs two or more apart
    diff = mids[:, i] - mids[:, j]
    ok = (diff.real**2 + diff.imag**2 >= g.self_dist**2).all(1)
    return pts[ok].reshape(-1, n, 2)


def _distance(p: np.ndarray, paddles: np.ndarray) -> np.ndarray:
    """Distances of points p (...) to paddles (..., 2) (complex, broadcast)."""
    a, ab = paddles[..., 0], paddles[..., 1] - paddles[..., 0]
    t = np.clip(((p - a) * ab.conj()).real / (ab * ab.conj()).real, 0, 1)
    return np.abs(p - a - t * ab)


def _clear(sites: np.ndarray, paths: np.ndarray, g: _Geometry) -> np.ndarray:
    """(c,): True where every site (s,) keeps the clearance from candidate path c (c, n, 2)."""
    return (_distance(sites[:, None, None], paths[None]) >= g.clearance).all((0, 2))


def _inside(paths: np.ndarray, g: _Geometry) -> np.ndarray:
    """(c,): True where candidate path c (c, n, 2) lies within the margin."""
    lo, hi = g.margin, g.R - g.margin
    x, y = paths.real, paths.imag
    return ((x >= lo) & (x <= hi) & (y >= lo) & (y <= hi)).all((1, 2))


def _placed(rng: np.random.Generator, shapes: np.ndarray, g: _Geometry) -> np.ndarray:
    """Each shape (c, n, 2) moved to a uniformly random position inside the image."""
    lo_x, lo_y = g.margin - shapes.real.min((1, 2)), g.margin - shapes.imag.min((1, 2))
    hi_x, hi_y = g.R - g.margin - shapes.real.max((1, 2)), g.R - g.margin - shapes.imag.max((1, 2))
    u = rng.random((2, len(shapes)))
    shift = lo_x + u[0] * (hi_x - lo_x) + 1j * (lo_y + u[1] * (hi_y - lo_y))
    return shapes + shift[:, None, None]


def _angle(z: np.ndarray) -> np.ndarray:
    return np.arctan2(z.imag, z.real)


def _layout(rng: np.random.Generator, g: _Geometry, n_paths: int):
    """Paths (n_paths, n, 2) complex — A, the decoy B, the distractors — and the dot sites
    (3,): P1 = A's start, P2 = A's end, P3 = B's end."""
    pool = np.empty((0, g.n, 2), dtype=complex)

    def take(k: int) -> np.ndarray:  # k unused valid shapes
        nonlocal pool
        for _ in range(1000):
            if len(pool) >= k:
                out, pool = pool[:k], pool[k:]
                return out
            pool = np.concatenate([pool, _shapes(rng, g, _TRIES)])
        raise ValueError(f"paths of {g.n} paddles hardly ever fit a {g.R}×{g.R} image")

    for _ in range(10_000):
        a = _placed(rng, take(1), g)[0]
        p1, p2 = a[0, 0], a[-1, 1]
        d = abs(p2 - p1)
        alpha = _angle(a[-1, 1] - a[-1, 0]) - _angle(p2 - p1)  # end paddle vs P1 → P2
        # the decoy: candidate shapes turned so that the end paddle makes the angle ±alpha
        # with P1 → P3, P3 = P1 + d e^{i phi} inside the image, then moved to end at P3
        phi = rng.uniform(0, 2 * np.pi, 4 * _TRIES)
        p3 = p1 + d * np.exp(1j * phi)
        keep = (np.minimum(p3.real, p3.imag) >= g.margin) & (
            np.maximum(p3.real, p3.imag) <= g.R - g.margin
        )
        phi, p3 = phi[keep][:_TRIES], p3[keep][:_TRIES]
        cand = np.repeat(take(_TRIES // 4), 4, axis=0)[: len(phi)]  # 4 directions per shape
        sign = rng.choice((-1.0, 1.0), len(phi))
        turn = phi + sign * alpha - _angle(cand[:, -1, 1] - cand[:, -1, 0])
        cand = cand * np.exp(1j * turn)[:, None, None]
        cand += (p3 - cand[:, -1, 1])[:, None, None]
        ok = _inside(cand, g) & _clear(np.array([p1, p2]), cand, g)
        ok &= (_distance(p3[:, None, None], a[None]) >= g.clearance).all((1, 2))
        if not ok.any():
            continue
        first = np.argmax(ok)
        sites = np.array([p1, p2, p3[first]])
        paths = [a, cand[first]]
        for _ in range(4):  # the distractors: random places away from the dot sites
            cand = _placed(rng, take(_TRIES // 4), g)
            paths.extend(cand[_clear(sites, cand, g)][: n_paths - len(paths)])
            if len(paths) == n_paths:
                return np.stack(paths), sites
    raise RuntimeError(f"no layout of {n_paths} paths found in a {g.R}×{g.R} image")


def _render(g: _Geometry, paddles: np.ndarray, dots: np.ndarray) -> np.ndarray:
    """Antialiased intensity in [0, 1], (R, R): boxes along paddles (m, 2) and discs at dots
    (k,) (complex x + iy), each stamped in a small window around its centre."""
    h = int(np.ceil(max(g.paddle / 2 + g.half, g.dot) + 1))
    pad = h + 1
    canvas = np.zeros((g.R + 2 * pad, g.R + 2 * pad))
    offs = np.arange(-h, h + 1)

    def stamp(centres: np.ndarray, sdf) -> None:
        cols = np.floor(centres.real).astype(int)[:, None, None] + offs[None, None, :]
        rows = np.floor(centres.imag).astype(int)[:, None, None] + offs[None, :, None]
        px = (cols + 0.5) + 1j * (rows + 0.5) - centres[:, None, None]
        np.maximum.at(canvas, (rows + pad, cols + pad), np.clip(0.5 - sdf(px), 0, 1))

    if len(paddles):
        axis = paddles[:, 1] - paddles[:, 0]
        axis = (axis / np.abs(axis)).conj()[:, None, None]

        def box(px: np.ndarray) -> np.ndarray:
            local = px * axis  # along the paddle + i across it
            qx, qy = np.abs(local.real) - g.paddle / 2, np.abs(local.imag) - g.half
            return np.hypot(np.maximum(qx, 0), np.maximum(qy, 0)) + np.minimum(
                np.maximum(qx, qy), 0
            )

        stamp(paddles.mean(1), box)
    if len(dots):
        stamp(dots, lambda px: np.abs(px) - g.dot)
    return canvas[pad:-pad, pad:-pad]


def _to_uint8(x: np.ndarray) -> np.ndarray:
    return np.round(255 * np.clip(x, 0, 1)).astype(np.uint8)


def generate_image(
    rng: np.random.Generator,
    resolution: int,
    label: int,
    contour_length: int = 14,
    n_distractors: int | None = None,
    return_info: bool = False,
) -> np.ndarray | tuple[np.ndarray, dict]:
    """One Pathfinder image, uint8 (R, R). With ``return_info``: ``(image, info)``, info a
    dict with ``label``, ``dots`` (2, 2) dot centres (x, y), ``dot_paths`` (2,) the path
    each dot ends (0, 0 for label 1; 0, 1 for label 0), ``paths`` (n_paths, n, 2, 2) paddle
    end points and ``masks`` (n_paths, R, R) bool, the pixels each path alone inks."""
    if label not in (0, 1):
        raise ValueError(f"label must be 0 or 1, got {label!r}")
    if contour_length < 2:
        raise ValueError(f"contour_length must be ≥ 2, got {contour_length}")
    if n_distractors is None:
        n_distractors = default_distractors(contour_length)
    g = _Geometry(resolution, contour_length)
    paths, sites = _layout(rng, g, 2 + n_distractors)
    dots = sites[[0, 1]] if label == 1 else sites[[0, 2]]
    image = _to_uint8(_render(g, paths.reshape(-1, 2), dots))
    if not return_info:
        return image
    masks = np.stack([_to_uint8(_render(g, p, dots[:0])) > 0 for p in paths])
    info = {
        "label": label,
        "dots": np.stack([dots.real, dots.imag], -1),
        "dot_paths": np.array([0, 0 if label else 1]),
        "paths": np.stack([paths.real, paths.imag], -1),
        "masks": masks,
    }
    return image, info


def image_rng(seed: int, i: int) -> np.random.Generator:
    """The generator that draws image ``i`` of a set written with ``seed``."""
    return np.random.default_rng([seed, 1, i])


def balanced_labels(n: int, seed: int = 0) -> np.ndarray:
    """Labels (int64, n): images 2j and 2j + 1 get one 0 and one 1 in random order, so every
    even-sized batch of consecutive images is exactly balanced."""
    flip = np.random.default_rng([seed, 2]).integers(0, 2, (n + 1) // 2)
    return np.stack([flip, 1 - flip], 1).reshape(-1)[:n].astype(np.int64)


def _write_batch(job: tuple) -> int:
    """Write batch folder k (images, then its metadata file); returns the image count."""
    base, k, start, labels, resolution, seed, contour_length, n_distractors = job
    (base / "imgs" / str(k)).mkdir(parents=True, exist_ok=True)
    from PIL import Image

    g = _Geometry(resolution, contour_length)
    lines = []
    for i, label in enumerate(labels):
        rng = image_rng(seed, start + i)
        img = generate_image(rng, resolution, int(label), contour_length, n_distractors)
        Image.fromarray(img).save(base / "imgs" / str(k) / f"sample_{i}.png")
        lines.append(
            f"imgs/{k} sample_{i}.png {i} {label} {contour_length} {g.paddle:g} {n_distractors}\n"
        )
    with cache.atomic_file(base / "metadata" / f"{k}.npy") as tmp:
        tmp.write_text("".join(lines))
    return len(labels)


def write_dataset(
    root,
    n_images: int,
    resolution: int = 32,
    seed: int = 0,
    difficulty: str = "curv_contour_length_14",
    per_batch: int = 1000,
    progress: bool = False,
    n_distractors: int | None = None,
    workers: int = 1,
) -> Path:
    """Write ``n_images`` (labels from :func:`balanced_labels`) in the LRA layout under
    ``root/difficulty``, in batch folders of ``per_batch`` (even, so each is balanced; a
    last odd-sized one differs by one). Image i is drawn by :func:`image_rng` (seed, i): the
    set is the same for any ``per_batch`` and ``workers`` (processes, one batch folder per
    job). ``n_distractors``: paths besides the two that may carry a dot (default:
    :func:`default_distractors`)."""
    if per_batch < 2 or per_batch % 2:
        raise ValueError(f"per_batch must be even and ≥ 2, got {per_batch}")
    contour_length = contour_length_of(difficulty)
    if n_distractors is None:
        n_distractors = default_distractors(contour_length)
    root = Path(root)
    base = root / difficulty
    (base / "metadata").mkdir(parents=True, exist_ok=True)
    labels = balanced_labels(n_images, seed)
    jobs = [
        (base, k, s, labels[s : s + per_batch], resolution, seed, contour_length, n_distractors)
        for k, s in enumerate(range(0, n_images, per_batch))
    ]
    bar = {"total": n_images, "desc": f"pathfinder{resolution}", "unit": "img"}
    cache.map_jobs(_write_batch, jobs, workers, bar if progress else None, advance=int)
    return root


def ensure_pathfinder(
    n_images: int,
    resolution: int,
    seed: int = 0,
    difficulty: str = "curv_contour_length_14",
    per_batch: int = 1000,
    progress: bool = False,
    workers: int = 1,
    n_distractors: int | None = None,
) -> Path:
    """The cached generated set, ``$LIQUID_STREAM_CACHE/pathfinder<R>-<n>-<difficulty>-<seed>``
    (``-d<n_distractors>`` appended when not the default), written (atomically, under a file
    lock) if missing. Read it with :func:`read_dataset`."""
    name = f"pathfinder{resolution}-{n_images}-{difficulty}-{seed}"
    root = cache.cache_dir() / (name + ("" if n_distractors is None else f"-d{n_distractors}"))

    def build() -> None:
        with cache.atomic_dir(root) as tmp:
            write_dataset(
                tmp,
                n_images,
                resolution,
                seed,
                difficulty,
                per_batch,
                progress,
                n_distractors=n_distractors,
                workers=workers,
            )

    def usable() -> bool:
        return (root / difficulty / "metadata").is_dir()

    return cache.ensure_built(root, usable, build)


def _batch_key(path: Path) -> tuple:
    return (0, int(path.stem), "") if path.stem.isdigit() else (1, 0, path.stem)


def read_metadata(base: Path) -> list[tuple[str, int, Path, int]]:
    """(image path relative to ``base``, label, metadata file, line number) of every image,
    ordered by batch number, then index within the batch."""
    meta_dir = base / "metadata"
    if not meta_dir.is_dir():
        raise PathfinderDataError(f"{meta_dir}: no metadata folder (LRA Pathfinder layout)")
    files = sorted((p for p in meta_dir.glob("*.npy") if p.is_file()), key=_batch_key)
    if not files:
        raise PathfinderDataError(f"{meta_dir}: no metadata files (<batch>.npy)")
    entries = []
    for path in files:
        rows = []
        with open(path, errors="replace") as f:
            for line_no, line in enumerate(f, start=1):
                fields = line.split()
                if not fields:
                    continue
                where = f"{path}:{line_no}"
                if len(fields) < 4:
                    raise PathfinderDataError(
                        f"{where}: {len(fields)} fields, expected ≥ 4 (folder file index label …)"
                    )
                if fields[3] not in ("0", "1"):
                    raise PathfinderDataError(f"{where}: label {fields[3]!r} is not 0 or 1")
                try:
                    index = int(fields[2])
                except ValueError:
                    raise PathfinderDataError(
                        f"{where}: index {fields[2]!r} is not an integer"
                    ) from None
                rows.append((index, f"{fields[0]}/{fields[1]}", int(fields[3]), path, line_no))
        rows.sort(key=lambda r: r[0])
        entries.extend(r[1:] for r in rows)
    return entries


def _read_png(path: Path, where: str, size: int | None) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    if not path.is_file():
        raise PathfinderDataError(f"{path}: no such image (listed in {where})")
    try:
        with Image.open(path) as im:
            im.load()
            mode, arr = im.mode, np.asarray(im)
    except (OSError, UnidentifiedImageError, SyntaxError) as e:
        raise PathfinderDataError(f"{path}: unreadable PNG ({e}; listed in {where})") from None
    if mode != "L":
        raise PathfinderDataError(f"{path}: mode {mode!r}, expected 8-bit grayscale 'L'")
    if size is not None and arr.shape != (size, size):
        raise PathfinderDataError(
            f"{path}: size {arr.shape[1]}×{arr.shape[0]}, expected {size}×{size}"
        )
    return arr


def read_dataset(
    root, difficulty: str = "curv_contour_length_14", resolution: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (n, R, R), labels int64 (n,)) of an LRA Pathfinder folder, every
    metadata file of ``root/difficulty``, ordered by batch then index. All images must be
    R×R (``resolution``, or the size of the first image)."""
    root = Path(root)
    if not root.is_dir():
        raise PathfinderDataError(f"{root}: no such folder")
    base = root / difficulty
    if not base.is_dir():
        found = sorted(p.name for p in root.iterdir() if p.is_dir())
        raise PathfinderDataError(f"{base}: no such difficulty folder (found: {found})")
    entries = read_metadata(base)
    images, labels = None, np.empty(len(entries), dtype=np.int64)
    for k, (rel, label, meta, line_no) in enumerate(entries):
        path = base / rel
        arr = _read_png(path, f"{meta}:{line_no}", resolution)
        if images is None:
            if arr.shape[0] != arr.shape[1]:
                raise PathfinderDataError(f"{path}: not square, {arr.shape[1]}×{arr.shape[0]}")
            images = np.empty((len(entries), *arr.shape), dtype=np.uint8)
        elif arr.shape != images.shape[1:]:
            raise PathfinderDataError(
                f"{path}: size {arr.shape[1]}×{arr.shape[0]}, the first image is "
                f"{images.shape[2]}×{images.shape[1]}"
            )
        images[k] = arr
        labels[k] = label
    return images, labels


def split_indices(
    n: int, seed: int = 0, val: float = 0.1, test: float = 0.1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(train, val, test) indices: a random permutation of 0…n−1 cut into 1 − val − test,
    val and test (LRA / S4: 80/10/10 of the one pool of images)."""
    if not (0 <= val and 0 <= test and val + test <= 1):
        raise ValueError(f"bad split fractions val={val}, test={test}")
    perm = np.random.default_rng([seed, 0x5B1]).permutation(n)
    n_val, n_test = round(val * n), round(test * n)
    n_train = n - n_val - n_test
    return perm[:n_train], perm[n_train : n_train + n_val], perm[n_train + n_val :]
