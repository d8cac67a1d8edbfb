"""Move modules and rewrite every reference to them (issue 62 item 1, "layers you can see").

    python experiments/2026-12-08-layers/remap.py STEP [--no-move]

STEP names one of the move tables below (``core``, ``apps``, ``data``). For each file move
(old path → new path, repository-relative) it

1. ``git mv``s the file (creating the new package folders with an empty ``__init__.py``),
   unless ``--no-move`` (rewrite only: e.g. to re-apply the rewrite to a branch that
   changed meanwhile, whose files are already moved);
2. rewrites relative imports (``from .x import``) of every module in the package folders:
   resolved against the module's old package, mapped, re-relativised to its new package;
3. rewrites, in every tracked text file, dotted module names (``liquid_stream.x`` in
   imports, ``importlib`` / mock strings, ``python -m``, docs), ``from liquid_stream import
   x`` of a moved module and file paths (``liquid_stream/x.py``).

A second run finds nothing left to rewrite, with one exception: where an old module became
a package of the same name (``apps.kws`` → ``apps/kws/spotter.py``, ``apps.serve``,
``training.data.speech``), a bare mention of the new package (``"liquid_stream.apps.kws"``
in pyproject.toml) is taken for the old module: review the diff of a re-run. Left as
written: experiments/**.md (dated records) and this script.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {  # repository folder → package (pyproject.toml package-dir)
    "liquid_stream": "liquid_stream",
    "training": "liquid_stream.training",
    "export": "liquid_stream.export",
    "apps": "liquid_stream.apps",
}

NN = """cauchy cauchy_keops checkpoint chunked diag dplr ema fftconv frontend hippo kernel_base
layer liquid ltc ltc_kernel ltc_triton _ltc_triton_kernels model pair scalenorm""".split()
RUNTIME = "onnx_streamer validate meta quantized ltc_ort ltc_cpp".split()
IO = "wav wfdb lsl labels atomic bidmc_vocab".split()
VITALS = "cli lsl model monitor record run".split()
SPEECH = (
    "speech speech_synth kws_stream kws_baseline augment spec_augment phonetic piper_voice".split()
)
VITALS_DATA = """bidmc bidmc_baseline bidmc_crops bidmc_sim vitals_sim vitals_conditions pulse_eq
real_samples""".split()
LRA = "images listops lra_text pathfinder".split()

STEPS: dict[str, dict[str, str]] = {
    "core": {
        **{f"liquid_stream/{m}.py": f"liquid_stream/nn/{m}.py" for m in NN},
        **{f"liquid_stream/{m}.py": f"liquid_stream/runtime/{m}.py" for m in RUNTIME},
        **{f"liquid_stream/{m}.py": f"liquid_stream/io/{m}.py" for m in IO},
    },
    "data": {
        **{f"training/data/{m}.py": f"training/data/speech/{m}.py" for m in SPEECH},
        **{f"training/data/{m}.py": f"training/data/vitals/{m}.py" for m in VITALS_DATA},
        **{f"training/data/{m}.py": f"training/data/lra/{m}.py" for m in LRA},
    },
    "apps": {
        "apps/kws.py": "apps/kws/spotter.py",
        "apps/kws_cli.py": "apps/kws/cli.py",
        "apps/kws_tune.py": "apps/kws/tune.py",
        **{f"apps/vitals_{m}.py": f"apps/vitals/{m}.py" for m in VITALS},
        **{
            f"apps/{m}.py": f"apps/vitals/{m}.py"
            for m in ("alarms", "signal_quality", "ppg_polarity")
        },
        "apps/serve.py": "apps/serve/server.py",
        **{f"apps/serve_{m}.py": f"apps/serve/{m}.py" for m in ("cli", "client", "state")},
        "apps/batch.py": "apps/batch/__init__.py",
        **{f"apps/batch_{m}.py": f"apps/batch/{m}.py" for m in ("session", "kws", "vitals")},
        **{
            f"apps/{m}.py": f"apps/common/{m}.py"
            for m in ("audio", "resample", "interrupt", "plots")
        },
    },
}
TESTS = {  # test folder → test modules (tests/test_<name>.py)
    "nn": """fftconv frontend layer ltc ltc_kernel ltc_triton keops model scalenorm streaming
    cuda""",
    "runtime": "meta ltc_ort stream_input_guard shipped_models runtime_install",
    "io": "wfdb_io lsl",
    "export": "onnx ltc_onnx quantize ensemble",
    "scripts": "checkpoint_from_onnx widen_channels",
    "bench": "kws_peer",
    "apps/kws": "kws kws_tune kws_cpu_path",
    "apps/vitals": "vitals vitals_gaps vitals_shipped signal_quality ppg_polarity ecg_only",
    "apps/serve": "serve serve_fair serve_stale dashboard dashboard_reasons",
    "apps/batch": "batch",
    "apps/common": "resample",
    "training": "trainer train_run config_validation distributed crash_resume",
    "training/data/speech": """speech_data augment spec_augment kws_baseline piper_voice
    kws_sentences speech_stream_task""",
    "training/data/vitals": """bidmc_data bidmc_crops bidmc_task vitals_sim pulse_eq
    real_samples vitals_conditions beat_count""",
    "training/data/lra": "images listops lra_tasks lra_text pathfinder",
}
STEPS["tests"] = {
    f"tests/test_{t}.py": f"tests/{folder}/test_{t}.py"
    for folder, names in TESTS.items()
    for t in names.split()
}
# folders moved with a step (after its files): old → new
DIRS: dict[str, dict[str, str]] = {"apps": {"apps/web": "apps/serve/web"}}


def module_of(path: str) -> str | None:
    """The module of a file of the package folders; None for any other file (tests)."""
    parts = list(Path(path).with_suffix("").parts)
    if parts[0] not in FOLDERS:
        return None
    parts[0] = FOLDERS[parts[0]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def in_packages(path: str) -> bool:
    return path.endswith(".py") and Path(path).parts[0] in FOLDERS


def relative(target: str, package: str) -> str:
    """``target`` as a relative module spec from inside ``package``."""
    t, p = target.split("."), package.split(".")
    n = 0
    while n < min(len(t), len(p)) and t[n] == p[n]:
        n += 1
    return "." * (len(p) - n + 1) + ".".join(t[n:])


def exists(module: str) -> bool:
    """Whether ``module`` is a module or package of the tree as it is now."""
    pkgs = sorted(FOLDERS.items(), key=lambda kv: len(kv[1]), reverse=True)
    for folder, pkg in pkgs:
        if module == pkg or module.startswith(pkg + "."):
            rest = module[len(pkg) :].lstrip(".").split(".") if module != pkg else []
            p = ROOT.joinpath(folder, *rest)
            return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()
    return False


def resolve(package: str, level: int, module: str | None) -> str:
    base = package.split(".")
    return ".".join(base[: len(base) - (level - 1)] + ([module] if module else []))


def rewrite_relative(src: str, old_mod: str, new_mod: str, is_pkg: bool, mods: dict) -> str:
    old_pkg = old_mod if is_pkg else old_mod.rpartition(".")[0]
    new_pkg = new_mod if is_pkg else new_mod.rpartition(".")[0]
    lines = src.splitlines(keepends=True)
    for node in ast.walk(ast.parse(src)):
        if not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        now = resolve(new_pkg, node.level, node.module)
        names = [now] if node.module is not None else [f"{now}.{a.name}" for a in node.names]
        if exists(now) and now not in mods and all(exists(n) and n not in mods for n in names):
            continue  # already right (a second run, or neither side moved)
        base = old_pkg.split(".")
        base = ".".join(
            base[: len(base) - (node.level - 1)] + ([node.module] if node.module else [])
        )
        if node.module is None:  # from . import a, b: each name may be a module
            if not all(
                exists(f"{base}.{a.name}") or f"{base}.{a.name}" in mods for a in node.names
            ):
                continue  # names of a package __init__, not modules
            targets = {mods.get(f"{base}.{a.name}", f"{base}.{a.name}") for a in node.names}
            parents = {t.rpartition(".")[0] for t in targets}
            same = all(mods.get(f"{base}.{a.name}", a.name).endswith(a.name) for a in node.names)
            if len(parents) != 1 or not same:
                sys.exit(f"{new_mod}:{node.lineno}: split `from . import` by hand")
            spec = relative(parents.pop(), new_pkg)
        else:
            spec = relative(mods.get(base, base), new_pkg)
        i = node.lineno - 1
        new = re.sub(r"^(\s*from\s+)\.+[\w.]*(\s+import\b)", rf"\g<1>{spec}\g<2>", lines[i])
        if spec.strip(".") == "" and node.module is not None:
            sys.exit(f"{new_mod}:{node.lineno}: import of a package by name; check by hand")
        lines[i] = new
    return "".join(lines)


def text_rules(
    mods: dict[str, str], moves: dict[str, str], dirs: dict[str, str]
) -> list[tuple[re.Pattern, object]]:
    rules, firsts = [], []
    # from liquid_stream import a, b (single line, every name a moved module of one package)
    by_parent: dict[str, dict[str, str]] = {}
    for old, new in mods.items():
        parent, _, name = old.rpartition(".")
        by_parent.setdefault(parent, {})[name] = new

    for parent, names in by_parent.items():
        pat = re.compile(rf"^(\s*)from {re.escape(parent)} import ([\w ,]+?)(\s*(#.*)?)$", re.M)

        def fix(m, names=names, parent=parent):
            items = [s.strip() for s in m.group(2).split(",")]
            hit = [s for s in items if s.split(" as ")[0] in names]
            if not hit:
                return m.group(0)
            if len(hit) != len(items):
                raise SystemExit(f"mixed `from {parent} import {m.group(2)}`: split by hand")
            news = {names[s.split(" as ")[0]] for s in hit}
            pkgs = {n.rpartition(".")[0] for n in news}
            if len(pkgs) != 1 or any(
                not names[s.split(" as ")[0]].endswith("." + s.split(" as ")[0]) for s in hit
            ):
                raise SystemExit(f"`from {parent} import {m.group(2)}`: split by hand")
            return f"{m.group(1)}from {pkgs.pop()} import {m.group(2)}{m.group(3)}"

        firsts.append((pat, fix))
    # dotted names, longest first
    for old in sorted(mods, key=len, reverse=True):
        # an old module that is now a package (apps.kws → apps.kws.spotter): not its new
        # sub-modules (apps.kws.cli), so a second run leaves them alone
        subs = sorted(
            {n[len(old) + 1 :].split(".")[0] for n in mods.values() if n.startswith(old + ".")}
        )
        alt = "|".join(subs)
        ahead = rf"(?!\.(?:{alt})\b)(?!\s+import\s+\(?\s*(?:{alt})\b)" if subs else ""
        rules.append((re.compile(rf"(?<![\w.]){re.escape(old)}(?![\w]){ahead}"), mods[old]))
    # file paths (repository-relative, with .py)
    for old in sorted(moves, key=len, reverse=True):
        stem = old[: -len(".py")]
        new_stem = moves[old][: -len(".py")]
        rules.append((re.compile(rf"(?<![\w./]){re.escape(stem)}(?=\.py\b)"), new_stem))
    for old, new in dirs.items():
        rules.append((re.compile(rf"(?<![\w./]){re.escape(old)}(?=/)"), new))
    # `from pkg import module` last: its output must not meet the dotted rules
    return rules + firsts


def tracked_text_files() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    files = []
    for f in out.stdout.splitlines():
        p = ROOT / f
        if f.startswith("experiments/") and f.endswith(".md") or p == Path(__file__).resolve():
            continue  # dated records; this script's own tables
        if not p.is_file() or p.suffix in {".onnx", ".png", ".wav", ".npz", ".pt", ".so", ".jpg"}:
            continue
        try:
            p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        files.append(f)
    return files


def main() -> None:
    step = sys.argv[1]
    move = "--no-move" not in sys.argv
    moves = STEPS[step]
    dirs = DIRS.get(step, {})
    mods = {
        module_of(o): module_of(n)
        for o, n in moves.items()
        if module_of(o) is not None and module_of(o) != module_of(n)
    }
    if move:
        for old, new in moves.items():
            dst = ROOT / new
            for d in reversed(dst.relative_to(ROOT).parents[:-1]):
                if not (ROOT / d).is_dir():
                    (ROOT / d).mkdir()
                    if str(d / "__init__.py") in moves.values() or d.parts[0] == "tests":
                        continue  # a module becomes this package's __init__; test folders
                    (ROOT / d / "__init__.py").write_text("")
                    subprocess.run(["git", "add", str(d / "__init__.py")], cwd=ROOT, check=True)
            subprocess.run(["git", "mv", old, new], cwd=ROOT, check=True)
        for old, new in dirs.items():
            subprocess.run(["git", "mv", old, new], cwd=ROOT, check=True)
    inverse = {n: o for o, n in moves.items()}
    for f in tracked_text_files():
        if not in_packages(f):
            continue
        p = ROOT / f
        old_path = inverse.get(f, f)
        src = p.read_text()
        new = rewrite_relative(
            src, module_of(old_path), module_of(f), p.name == "__init__.py", mods
        )
        if new != src:
            p.write_text(new)
    rules = text_rules(mods, moves, dirs)
    changed = 0
    for f in tracked_text_files():
        p = ROOT / f
        src = p.read_text()
        new = src
        for pat, rep in rules:
            new = pat.sub(rep, new)
        if new != src:
            p.write_text(new)
            changed += 1
    print(f"{step}: {len(moves)} files moved, {changed} files rewritten")


if __name__ == "__main__":
    main()
