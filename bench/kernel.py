"""Forward+backward time and peak memory of one LiquidS4 layer on the CPU.

    python bench/kernel.py                 # full sweep (~11 min on an idle 2-vCPU machine)
    python bench/kernel.py --quick         # L = 1024, 4000, N = 7, PB only (~45 s)
    python bench/kernel.py --rounds 2      # two interleaved passes, medians over both
    python bench/kernel.py --profile       # torch.profiler of dplr/PB, N=64, L=16000 only
    python bench/kernel.py --batch 8 --lengths 4000 --states 7
    python bench/kernel.py --compare-official PATH --rounds 3   # vs the official code

What is measured: ``LiquidS4(d_model=128, d_state=N, mode, liquid, liquid_order=2, backend)``
on ``u (B, L, H=128)`` (B = ``--batch``, default 2), loss ``y.square().mean()``,
``torch.set_num_threads(2)``, one ``forward + backward`` per call; L ∈ {1024, 4000, 16000},
N ∈ {7, 64}, mode ∈ {dplr, diag}, liquid ∈ {None, pb, kb, ltc}, Cauchy backend ∈ {torch,
keops} (dplr only: diag uses a Vandermonde product, no Cauchy sum, so its backend is
irrelevant and it runs once; ltc is diag only).

Every configuration runs in a fresh subprocess: 1 warm-up call (absorbs the KeOps probe and
compile; KEOPS_CACHE_FOLDER defaults to ``.cache/keops``) then ``--reps`` timed calls. Time is
the median over all timed calls of all rounds; memory is the process's peak RSS
(``getrusage(RUSAGE_SELF).ru_maxrss``, includes ≈0.25 GB of interpreter + torch).

Naive alternative (dplr, torch backend): the same layer with the chunked Cauchy sum replaced
by the literal broadcast ``(v[:, :, None, :] / (z[:, None] − w[:, None, None, :])).sum(-1)``,
which materialises the full (H, R, Lz, M) tensor (autograd keeps it for the backward pass);
skipped where its estimated peak exceeds ``--naive-max-gb``. Its output is checked against ours.
For ``ltc`` (diag) the naive alternative is the literal recurrence x_t = a_t x_{t−1} + b_t as a
Python loop over time through autograd (instead of the blocked scan with its adjoint backward).

Also: a memory check (H=512, N=64, L=16384, B=1, dplr, PB, torch; fwd+bwd) and the issue's
targets (B=2, H=128, L=16000, dplr, PB p=2, fwd+bwd: N=64 ≤ 3 s, N=7 ≤ 0.8 s) as PASS/FAIL
(judged at B = 2 only).

``--compare-official PATH``: PATH holds the official Liquid-S4 code (a checkout of github
raminmh/liquid-s4; never a dependency of this project). Its layer
``src/models/sequence/ss/s4.py`` ``S4(d_model=H, d_state=N, l_max=L, transposed=False,
liquid_kernel="polyb", liquid_degree=2, mode="nplr", measure="legs")`` (its defaults
otherwise: GELU, GLU output linear, all-combinations correlations) runs beside ours
(``dplr``, PB, p = 2, torch backend) at the same B, H, L, N, fwd + bwd of
``y.square().mean()``, each in its own process, ours and theirs adjacent in every round and
the order reversed every other round (``--rounds``); the table gives per implementation
the median and [min, max] over all timed calls of all rounds, the peak RSS, and the
ratios official / ours. Its pure-torch Cauchy and Vandermonde paths are used (pykeops is
hidden from it and its CUDA extension is not built); its package ``__init__`` files, which
pull in its training framework (hydra, pytorch-lightning, omegaconf), are not run: the
worker registers empty packages for ``src``, ``src.models``, ``src.models.sequence``,
``src.models.sequence.ss`` and ``src.utils``, and ``src.utils.train`` as ``logging``'s
``getLogger`` (all the layer takes from it). Its own requirements ``einops`` and
``opt_einsum`` must be importable (e.g. ``pip install --target DIR einops opt_einsum`` and
``PYTHONPATH=DIR``). A PATH without that file, or a layer that cannot be imported, is
skipped with a note; the sweep then times ours alone.
The machine is noisy (±50% run to run) and may be shared: before each run the script waits
(up to ``--idle-wait`` s) for other processes to leave the CPUs idle, measures the CPU share
other processes take during the timed calls (/proc/stat minus this process's CPU time), reruns
a disturbed configuration (> 15%, up to ``--retries`` times) and keeps the least disturbed
attempt; times still disturbed are marked ``*``. Weights are random (timing does not depend
on them).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

LIQUIDS: tuple[str | None, ...] = (None, "pb", "kb", "ltc")
TARGETS = {64: 3.0, 7: 0.8}  # N → seconds, L = 16000, dplr, PB
TARGET_L = 16000
BUSY = 0.15  # other processes' CPU share before a run above which its time is marked *
# Naive fwd+bwd peak ≈ this many (H, R, Lz, M) complex64 tensors (5.5 measured at N=64,
# L=4000 and 8000, plus margin): the division's backward holds several full-size temporaries.
NAIVE_TENSORS = 6.0

Config = dict[str, Any]


# ------------------------------------------------------------------------------------
# Worker: one configuration, in its own process.
# ------------------------------------------------------------------------------------


def cauchy_broadcast(v, z, w, backend: str = "torch"):  # noqa: ARG001 - same signature
    """Literal Cauchy sum, materialising the full (H, R, Lz, M) tensor."""
    return (v[:, :, None, :] / (z[None, None, :, None] - w[:, None, None, :])).sum(-1)


def ltc_loop(u, system, x0=None, block=None, max_elements=None):  # noqa: ARG001
    """Naive LTC: the literal recurrence, one autograd step per time step."""
    import torch

    B, H, L = u.shape
    x = system.A_bar.new_zeros(B, H, system.A_bar.shape[-1]) if x0 is None else x0
    ys = []
    for t in range(L):
        ut = u[:, :, t, None]
        x = (system.A_bar + system.B_liq * torch.tanh(ut)) * x + system.B_bar * ut
        ys.append(system.scale * torch.einsum("hm,bhm->bh", system.C, x).real)
    return torch.stack(ys, -1), x


def worker(cfg: Config) -> dict[str, Any]:
    """Warm-up + ``reps`` timed fwd+bwd calls of one configuration; returns times and RSS."""
    load = os.getloadavg()[0]
    import torch

    from liquid_stream import LiquidS4

    torch.set_num_threads(2)
    torch.manual_seed(0)
    if cfg.get("official"):
        layer = official_layer(cfg)
    else:
        layer = LiquidS4(
            d_model=cfg["H"],
            d_state=cfg["N"],
            mode=cfg["mode"],
            liquid=cfg["liquid"],
            liquid_order=2,
            backend=cfg["backend"],
        )
    u = torch.randn(cfg["B"], cfg["L"], cfg["H"])
    rel_err = None
    if cfg["naive"]:
        import liquid_stream.nn.dplr as dplr
        import liquid_stream.nn.layer as layer_module

        with torch.no_grad():
            ref = layer(u)
        if cfg["liquid"] == "ltc":
            layer_module.ltc_scan = ltc_loop  # the layer looks it up at call time
        else:
            dplr.cauchy = cauchy_broadcast  # the layer's DPLR kernel looks it up at call time
    base_gb = rss_gb()

    def step() -> float:
        layer.zero_grad(set_to_none=True)
        t = time.perf_counter()
        y = layer(u)
        y = y[0] if isinstance(y, tuple) else y  # the official layer returns (y, state)
        y.square().mean().backward()
        return time.perf_counter() - t

    warm = step()
    stat0, cpu0 = proc_stat(), time.process_time()
    times = [step() for _ in range(cfg["reps"])]
    stat1, cpu1 = proc_stat(), time.process_time()
    # CPU share used by *other* processes while the timed calls ran (0 … 1).
    total, busy = stat1[0] - stat0[0], stat1[1] - stat0[1]
    own = (cpu1 - cpu0) * os.sysconf("SC_CLK_TCK")
    others = max(0.0, busy - own) / max(1, total)
    if cfg["naive"]:
        with torch.no_grad():
            y = layer(u)
        rel_err = float((y - ref).abs().max() / ref.abs().max())
    return {
        "warmup_s": warm,
        "times": times,
        "peak_gb": rss_gb(),
        "base_gb": base_gb,
        "load": load,
        "others": others,
        "rel_err": rel_err,
    }


OFFICIAL_LAYER = Path("src/models/sequence/ss/s4.py")
OFFICIAL_STUBS = ("src", "src.models", "src.models.sequence", "src.models.sequence.ss", "src.utils")


def official_layer(cfg: Config):
    """The official Liquid-S4 layer from the checkout ``cfg["official"]`` (module
    docstring: polyb, legs, its pure-torch Cauchy path; its framework imports stubbed)."""
    import logging
    import types

    root = Path(cfg["official"]).resolve()
    # its pure-torch paths: pykeops hidden, its CUDA extension (extensions/ of the checkout)
    # never imported; its modules load through the packages registered below, not sys.path
    sys.modules["pykeops"] = None  # type: ignore[assignment]
    sys.modules["extensions"] = None  # type: ignore[assignment]
    for name in OFFICIAL_STUBS:  # packages without their __init__ (hydra, lightning, ...)
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(root / name.replace(".", "/"))]
        sys.modules[name] = pkg
    train = types.ModuleType("src.utils.train")
    train.get_logger = logging.getLogger  # type: ignore[attr-defined]
    sys.modules["src.utils.train"] = train
    for name in (*OFFICIAL_STUBS[1:], "src.utils.train"):
        parent, _, leaf = name.rpartition(".")
        setattr(sys.modules[parent], leaf, sys.modules[name])
    logging.disable(logging.ERROR)  # its import warns about the missing fast kernels
    from src.models.sequence.ss.s4 import S4  # type: ignore[import-not-found]

    return S4(
        d_model=cfg["H"],
        d_state=cfg["N"],
        l_max=cfg["L"],
        transposed=False,
        liquid_kernel="polyb",
        liquid_degree=2,
        mode="nplr",
        measure="legs",
    )


def official_note(path: str) -> str | None:
    """Why the official code at ``path`` cannot be timed (None: it looks usable)."""
    if not (Path(path) / OFFICIAL_LAYER).is_file():
        return (
            f"no official Liquid-S4 code at {path} (expected {OFFICIAL_LAYER} of a "
            "github raminmh/liquid-s4 checkout)"
        )
    return None


def rss_gb() -> float:
    """Peak resident set size of this process so far, GB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def proc_stat() -> tuple[int, int]:
    """(total, busy) CPU ticks of the whole machine so far, from /proc/stat ((0, 0) if absent)."""
    try:
        with open("/proc/stat") as f:
            vals = [int(x) for x in f.readline().split()[1:8]]
    except OSError:
        return 0, 0
    return sum(vals), sum(vals) - vals[3] - vals[4]  # idle and iowait are not busy


def cpu_busy(seconds: float = 0.5) -> float:
    """Fraction of all CPUs busy over the next ``seconds``."""
    t0, b0 = proc_stat()
    time.sleep(seconds)
    t1, b1 = proc_stat()
    return (b1 - b0) / max(1, t1 - t0)


def wait_idle(max_wait: float, threshold: float = 0.1) -> float:
    """Wait (up to ``max_wait`` s) until other processes leave the CPUs idle; return busy."""
    deadline = time.monotonic() + max_wait
    while True:
        busy = cpu_busy()
        if busy < threshold or time.monotonic() >= deadline:
            return busy
        time.sleep(4.0)


def measure(cfg: Config, args: argparse.Namespace) -> dict[str, Any]:
    """Run a configuration after waiting for an idle machine; rerun (up to ``--retries``
    times) when other processes took > BUSY of the CPUs during the timed calls, and keep
    the least disturbed attempt."""
    best: dict[str, Any] | None = None
    for attempt in range(1 + args.retries):
        busy = wait_idle(args.idle_wait)
        res = run_config(cfg, args.timeout)
        if "times" not in res:
            return res
        res["busy_before"] = busy
        if best is None or res["others"] < best["others"]:
            best = res
        best["attempts"] = attempt + 1
        if best["others"] <= BUSY:
            break
    assert best is not None
    return best


def run_config(cfg: Config, timeout: float) -> dict[str, Any]:
    """Run one configuration in a fresh interpreter; errors are returned, not raised."""
    env = os.environ.copy()
    env.setdefault("KEOPS_CACHE_FOLDER", str(ROOT / ".cache" / "keops"))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(cfg)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f} s"}
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if res.returncode != 0 or not lines:
        return {"error": f"exit {res.returncode}: {(res.stdout + res.stderr).strip()[-500:]}"}
    return json.loads(lines[-1])


# ------------------------------------------------------------------------------------
# The sweep.
# ------------------------------------------------------------------------------------


def cauchy_rows(liquid: str | None) -> int:
    """R of the DPLR Cauchy sum: k00 (1 + KB orders), k01, k10 (1 + KB orders), k11."""
    r = 2 if liquid == "kb" else 1
    return r + 1 + r + 1


def naive_estimate_gb(cfg: Config) -> float:
    """Estimated peak of the naive fwd+bwd (complex64), GB."""
    if cfg["liquid"] == "ltc":  # autograd keeps ~4 (B, H, M) tensors per time step
        return 4 * cfg["B"] * cfg["H"] * (cfg["N"] // 2) * cfg["L"] * 8 / 2**30 + 0.3
    M = 2 * (cfg["N"] // 2)
    full = cfg["H"] * cauchy_rows(cfg["liquid"]) * (cfg["L"] // 2 + 1) * M * 8
    return NAIVE_TENSORS * full / 2**30 + 0.3


def configs(args: argparse.Namespace) -> list[Config]:
    """All configurations of the sweep, with a ``kind`` of main / naive / memcheck."""
    out: list[Config] = []
    base = {"H": 128, "B": args.batch, "reps": args.reps, "naive": False, "kind": "main"}
    if args.compare_official:  # ours (dplr, PB, torch) and the official layer, side by side
        for L in args.lengths:
            for N in args.states:
                cfg = dict(base, L=L, N=N, mode="dplr", liquid="pb", backend="torch")
                out.append(cfg)
                out.append(dict(cfg, kind="official", official=args.compare_official))
        return out
    for L in args.lengths:
        for N in args.states:
            for liquid in args.liquids:
                for mode in args.modes:
                    if liquid == "ltc" and mode != "diag":
                        continue
                    backends = args.backends if mode == "dplr" else ["torch"]
                    for backend in backends:
                        cfg = dict(base, L=L, N=N, mode=mode, liquid=liquid, backend=backend)
                        out.append(cfg)
                    if args.naive and (mode == "dplr" or liquid == "ltc"):
                        cfg = dict(
                            base,
                            L=L,
                            N=N,
                            mode=mode,
                            liquid=liquid,
                            backend="torch",
                            naive=True,
                            kind="naive",
                        )
                        cfg["naive_est_gb"] = naive_estimate_gb(cfg)
                        out.append(cfg)
    if args.memcheck:
        out.append(
            dict(
                base,
                H=512,
                B=1,
                L=16384,
                N=64,
                mode="dplr",
                liquid="pb",
                backend="torch",
                kind="memcheck",
            )
        )
    return out


def key(cfg: Config) -> tuple:
    return (
        cfg["kind"],
        cfg["H"],
        cfg["B"],
        cfg["L"],
        cfg["N"],
        cfg["mode"],
        cfg["liquid"],
        cfg["backend"],
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 4000, 16000])
    ap.add_argument("--states", type=int, nargs="+", default=[7, 64])
    ap.add_argument("--modes", nargs="+", default=["dplr", "diag"])
    ap.add_argument("--liquids", nargs="+", default=["none", "pb", "kb", "ltc"])
    ap.add_argument("--backends", nargs="+", default=["torch", "keops"])
    ap.add_argument("--rounds", type=int, default=1, help="interleaved passes over the sweep")
    ap.add_argument("--reps", type=int, default=3, help="timed calls per process (after 1 warm-up)")
    ap.add_argument("--batch", type=int, default=2, help="batch size B of u (B, L, H)")
    ap.add_argument(
        "--compare-official",
        metavar="PATH",
        default=None,
        help="time the official Liquid-S4 layer (a raminmh/liquid-s4 checkout at "
        "PATH) beside ours (dplr, PB) at the same B, H, L, N",
    )
    ap.add_argument("--naive-max-gb", type=float, default=8.0)
    ap.add_argument("--no-naive", dest="naive", action="store_false")
    ap.add_argument("--no-memcheck", dest="memcheck", action="store_false")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per subprocess")
    ap.add_argument(
        "--idle-wait",
        type=float,
        default=60.0,
        help="max seconds to wait before each run for other processes to go idle",
    )
    ap.add_argument(
        "--retries",
        type=int,
        default=2,
        help="reruns of a configuration disturbed by other processes",
    )
    ap.add_argument("--quick", action="store_true", help="L=1024,4000; N=7; PB only")
    ap.add_argument("--profile", action="store_true", help="only profile dplr/PB N=64 L=16000")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))), flush=True)
        return
    if args.profile:
        profile()
        return
    if args.quick:
        args.lengths, args.states, args.liquids = [1024, 4000], [7], ["pb"]
        args.memcheck = False
    args.liquids = [None if x == "none" else x for x in args.liquids]
    note = official_note(args.compare_official) if args.compare_official else None
    if note:
        print(f"--compare-official skipped: {note}; timing ours alone", flush=True)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    todo = configs(args)
    samples: dict[tuple, list[dict[str, Any]]] = {}
    t0 = time.perf_counter()
    for rnd in range(args.rounds):
        order = todo if rnd % 2 == 0 else todo[::-1]  # interleave: alternate the order
        for i, cfg in enumerate(order):
            tag = " ".join(
                f"{k}={cfg[k]}" for k in ("kind", "mode", "backend", "liquid", "B", "N", "L")
            )
            if cfg["naive"] and cfg["naive_est_gb"] > args.naive_max_gb:
                res = {"skipped": f"estimated {cfg['naive_est_gb']:.1f} GB > {args.naive_max_gb}"}
            elif cfg["kind"] == "official" and note:
                res = {"skipped": note}
            else:
                res = measure(cfg, args)
            samples.setdefault(key(cfg), []).append(res)
            msg = (
                res.get("error")
                or res.get("skipped")
                or (
                    f"median {statistics.median(res['times']):.3f} s, "
                    f"peak {res['peak_gb']:.2f} GB, "
                    f"others used {res['others']:.0%} of the CPUs, "
                    f"{res['attempts']} attempt(s)"
                )
            )
            print(
                f"[{time.perf_counter() - t0:6.0f} s] round {rnd + 1} {i + 1}/{len(order)} "
                f"{tag}: {msg}",
                flush=True,
            )

    rows = [summarise(cfg, samples[key(cfg)]) for cfg in todo]
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "argv": sys.argv[1:],
        "wall_s": time.perf_counter() - t0,
        "commit": git_commit(),
    }
    if args.compare_official:
        print_official(rows, args, note)
        path = out_dir / "kernel_official.json"
        path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        print(f"\nwrote {path} ({meta['wall_s']:.0f} s)")
        return
    print_report(rows, args)
    (out_dir / "kernel.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    plot(rows, args, out_dir / "kernel.png")
    print(
        f"\nwrote {out_dir / 'kernel.json'} and {out_dir / 'kernel.png'} ({meta['wall_s']:.0f} s)"
    )


def summarise(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """One row: the configuration plus median time / peak RSS over all rounds."""
    row = {k: v for k, v in cfg.items() if k not in ("reps", "naive", "official")}
    ok = [r for r in results if "times" in r]
    if not ok:
        row["status"] = results[0].get("error") or results[0].get("skipped")
        return row
    times = [t for r in ok for t in r["times"]]
    row.update(
        status="ok",
        median_s=statistics.median(times),
        times=times,
        peak_gb=max(r["peak_gb"] for r in ok),
        base_gb=min(r["base_gb"] for r in ok),
        warmup_s=[r["warmup_s"] for r in ok],
        load=[r["load"] for r in ok],
        others=[r["others"] for r in ok],
        attempts=[r["attempts"] for r in ok],
        rel_err=ok[0]["rel_err"],
    )
    return row


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# ------------------------------------------------------------------------------------
# Report.
# ------------------------------------------------------------------------------------


def fmt_s(row: dict[str, Any] | None) -> str:
    if row is None:
        return "—"
    if row["status"] != "ok":
        return "skip"
    return f"{row['median_s']:.3f}" + ("*" if max(row["others"]) > BUSY else "")


def fmt_gb(row: dict[str, Any] | None) -> str:
    if row is None:
        return "—"
    return f"{row['peak_gb']:.2f}" if row["status"] == "ok" else "—"


def print_report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    by = {(r["kind"], r["mode"], r["backend"], r["liquid"], r["N"], r["L"]): r for r in rows}
    liq = {None: "—", "pb": "PB", "kb": "KB", "ltc": "LTC"}
    print(
        f"\nfwd+bwd of one LiquidS4 layer, B={args.batch}, H=128, liquid_order=2, 2 threads; "
        "median seconds / peak RSS GB"
    )
    print("(diag: Vandermonde kernel, no Cauchy sum — the backend is irrelevant, measured once;")
    print(" LTC: blocked scan, diag only; its naive = the per-step loop through autograd)\n")
    print(
        "| mode | N | liquid | L | torch s | torch GB | keops s | keops GB "
        "| naive s | naive GB | naive/torch time | naive/torch mem |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    notes = []
    for mode in args.modes:
        for N in args.states:
            for liquid in args.liquids:
                for L in args.lengths:
                    if liquid == "ltc" and mode != "diag":
                        continue
                    t = by.get(("main", mode, "torch", liquid, N, L))
                    k = by.get(("main", mode, "keops", liquid, N, L))
                    n = by.get(("naive", mode, "torch", liquid, N, L))
                    ratio_t = ratio_m = "—"
                    if n is not None and n["status"] == "ok" and t and t["status"] == "ok":
                        ratio_t = f"{n['median_s'] / t['median_s']:.1f}×"
                        ratio_m = f"{n['peak_gb'] / t['peak_gb']:.1f}×"
                    elif n is not None and n["status"] != "ok":
                        what = f"{mode} N={N} {liquid or 'no liquid'} L={L}"
                        notes.append(f"naive {what}: {n['status']}")
                    print(
                        f"| {mode} | {N} | {liq[liquid]} | {L} | {fmt_s(t)} | {fmt_gb(t)} | "
                        f"{fmt_s(k)} | {fmt_gb(k)} | {fmt_s(n)} | {fmt_gb(n)} | "
                        f"{ratio_t} | {ratio_m} |"
                    )
    for note in notes:
        print(f"- skipped {note}")
    errs = [n for n in rows if n["kind"] == "naive" and n["status"] == "ok"]
    if errs:
        print(
            f"- naive vs ours, max relative difference of y: {max(r['rel_err'] for r in errs):.1e}"
        )
    others = [x for r in rows if r["status"] == "ok" for x in r["others"]]
    if others:
        n_busy = sum(b > BUSY for b in others)
        print(
            f"- `*` = other processes used > {BUSY:.0%} of the CPUs during the timed calls "
            f"even after {args.retries} rerun(s) ({n_busy} of {len(others)} runs; "
            f"max {max(others):.0%})"
        )

    for r in rows:
        if r["kind"] == "memcheck":
            got = r["status"]
            if r["status"] == "ok":
                got = f"{fmt_s(r)} s, peak RSS {r['peak_gb']:.2f} GB"
            print(f"\nmemory check (H=512, N=64, L=16384, B=1, dplr, PB, torch, fwd+bwd): {got}")
    if args.batch != 2:
        print(f"\ntargets (B=2, L=16000, dplr, PB) not judged at B={args.batch}")
    elif TARGET_L in args.lengths and "pb" in args.liquids and "dplr" in args.modes:
        print()
        for backend in args.backends:
            for N, limit in TARGETS.items():
                r = by.get(("main", "dplr", backend, "pb", N, TARGET_L))
                if r is None:
                    continue
                if r["status"] != "ok":
                    print(f"FAIL target dplr PB N={N} L={TARGET_L} {backend}: {r['status']}")
                    continue
                verdict = "PASS" if r["median_s"] <= limit else "FAIL"
                print(
                    f"{verdict} target dplr PB N={N} L={TARGET_L} {backend}: "
                    f"median {r['median_s']:.2f} s (target ≤ {limit} s; "
                    f"calls {', '.join(f'{t:.2f}' for t in r['times'])}; "
                    f"others used {max(r['others']):.0%} of the CPUs)"
                )
    else:
        print("\ntargets (L=16000, dplr, PB) not measured in this run")


def print_official(rows: list[dict[str, Any]], args: argparse.Namespace, note: str | None) -> None:
    """The side-by-side table of ``--compare-official``."""
    by = {(r["kind"], r["L"], r["N"]): r for r in rows}

    def cell(r: dict[str, Any] | None) -> tuple[str, str]:
        if r is None or r["status"] != "ok":
            return "skip", "—"
        t = r["times"]
        mark = "*" if max(r["others"]) > BUSY else ""
        return (f"{r['median_s']:.3f}{mark} [{min(t):.3f}, {max(t):.3f}]", f"{r['peak_gb']:.2f}")

    print(
        f"\nfwd+bwd of one layer, ours (dplr, PB p=2, torch backend) vs the official "
        f"Liquid-S4 S4 layer (polyb, degree 2, legs, pure-torch Cauchy); B={args.batch}, "
        f"H=128, 2 threads; median s [min, max] over {args.rounds} interleaved round(s) × "
        f"{args.reps} calls; peak RSS GB\n"
    )
    print(
        "| L | N | ours s | ours GB | official s | official GB | time official/ours "
        "| memory official/ours |"
    )
    print("|---|---|---|---|---|---|---|---|")
    notes = []
    for L in args.lengths:
        for N in args.states:
            ours, off = by.get(("main", L, N)), by.get(("official", L, N))
            (ts, gs), (to, go) = cell(ours), cell(off)
            rt = rm = "—"
            if ours and off and ours["status"] == off["status"] == "ok":
                rt = f"{off['median_s'] / ours['median_s']:.1f}×"
                rm = f"{off['peak_gb'] / ours['peak_gb']:.1f}×"
            elif off is not None and off["status"] != "ok" and not note:
                notes.append(f"official L={L} N={N}: {off['status']}")
            print(f"| {L} | {N} | {ts} | {gs} | {to} | {go} | {rt} | {rm} |")
    if note:
        print(f"- official layer skipped: {note}")
    for n in notes:
        print(f"- {n}")
    others = [x for r in rows if r["status"] == "ok" for x in r["others"]]
    if others:
        print(
            f"- `*` = other processes used > {BUSY:.0%} of the CPUs during the timed calls "
            f"(max {max(others):.0%}); peak RSS includes ≈0.25 GB of interpreter + torch"
        )


def plot(rows: list[dict[str, Any]], args: argparse.Namespace, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        1, len(args.states), figsize=(6 * len(args.states), 4.5), squeeze=False
    )
    colors = {
        ("dplr", "torch", "main"): "C0",
        ("dplr", "keops", "main"): "C1",
        ("diag", "torch", "main"): "C2",
        ("dplr", "torch", "naive"): "C3",
        ("diag", "torch", "naive"): "C4",
    }
    styles = {None: "-o", "pb": "--s", "kb": ":^", "ltc": "-.d"}
    for ax, N in zip(axes[0], args.states, strict=True):
        for (mode, backend, kind), color in colors.items():
            for liquid in args.liquids:
                pts = sorted(
                    (r["L"], r["median_s"])
                    for r in rows
                    if (r["kind"], r["mode"], r["backend"], r["liquid"], r["N"])
                    == (kind, mode, backend, liquid, N)
                    and r["status"] == "ok"
                )
                if pts:
                    naive = "naive loop" if liquid == "ltc" else "naive broadcast"
                    name = naive if kind == "naive" else f"{mode}/{backend}"
                    ax.plot(
                        *zip(*pts, strict=True),
                        styles[liquid],
                        color=color,
                        label=f"{name}, {liquid or 'no liquid'}",
                    )
        if N in TARGETS:
            ax.axhline(TARGETS[N], color="k", lw=0.8, label=f"target {TARGETS[N]} s (L=16000)")
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="L",
            ylabel="fwd+bwd seconds (median)",
            title=f"one LiquidS4 layer, B={args.batch}, H=128, N={N}, 2 threads",
        )
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


# ------------------------------------------------------------------------------------
# Profile.
# ------------------------------------------------------------------------------------


def profile(N: int = 64, L: int = TARGET_L) -> None:
    """Top ops (self CPU time) of one fwd+bwd of dplr/PB, torch backend, after a warm-up."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from liquid_stream import LiquidS4

    torch.set_num_threads(2)
    torch.manual_seed(0)
    layer = LiquidS4(128, N, mode="dplr", liquid="pb", liquid_order=2, backend="torch")
    u = torch.randn(2, L, 128)
    layer(u).square().mean().backward()
    layer.zero_grad(set_to_none=True)
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        layer(u).square().mean().backward()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    main()
