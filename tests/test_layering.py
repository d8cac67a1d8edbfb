"""The layering rule, checked on the source: who may import whom.

    core  ←  training, export  ←  apps

- **core**: ``liquid_stream/`` (package ``liquid_stream``), except the entry points below.
  It imports no training, export or apps module.
- **training** (``training/`` = ``liquid_stream.training``) and **export** (``export/`` =
  ``liquid_stream.export``) import the core and themselves only: training never imports
  export or apps, export never imports training or apps.
- **apps** (``apps/`` = ``liquid_stream.apps``) import the core and themselves only —
  never training, never export: they run exported ONNX models on onnxruntime, torch-free.
- **entry points** may import every layer: ``liquid_stream/cli.py`` (it only wires each
  package's commands into ``liquid-stream``), ``liquid_stream/main_job.py`` (the main job
  runs the CLI end to end) and ``liquid_stream/demo.py`` (the tour trains, exports and
  streams). A package's own CLI module (``training/cli.py``, ``training/data/cli.py``,
  ``export/cli.py``, ``apps/*/cli.py``) is *not* an entry point: it holds its package's
  commands and obeys its package's rule.

Every ``.py`` file of the four folders is parsed with :mod:`ast`; every import counts —
module level or inside a function, ``import a.b``, ``from a import b``, relative imports
(resolved against the file's package) and ``importlib.import_module("...")`` /
``__import__("...")`` with a literal name. Third-party and standard-library imports are
not constrained here (the torch-free checks below and in test_kws.py / test_onnx.py do
that for the runtime path).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# folder of the repository → the package it ships as (pyproject.toml [tool.setuptools.package-dir])
FOLDERS = {
    "liquid_stream": "liquid_stream",
    "training": "liquid_stream.training",
    "export": "liquid_stream.export",
    "apps": "liquid_stream.apps",
}
LAYERS = ("training", "export", "apps")  # sub-packages of liquid_stream that are a layer
# layer → the layers it may import (besides itself and third-party code)
ALLOWED = {
    "core": {"core"},
    "training": {"core", "training"},
    "export": {"core", "export"},
    "apps": {"core", "apps"},
}
ENTRY_POINTS = {"liquid_stream.cli", "liquid_stream.main_job", "liquid_stream.demo"}


def layer_of(module: str) -> str | None:
    """The layer of a ``liquid_stream...`` module name; None for anything else."""
    parts = module.split(".")
    if parts[0] != "liquid_stream":
        return None
    if len(parts) > 1 and parts[1] in LAYERS:
        return parts[1]
    return "core"


def module_name(path: Path, root: Path = ROOT) -> str:
    """``training/data/cli.py`` → ``liquid_stream.training.data.cli`` (a package's
    ``__init__.py`` → the package)."""
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    parts[0] = FOLDERS[parts[0]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """``(line, module)`` of every import in ``source`` (of the module named ``module``),
    relative ones resolved; ``from a import b`` yields ``a.b`` (b may be a module)."""
    package = module if is_package else module.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                if node.module:
                    base.append(node.module)
                mod = ".".join(base)
            else:
                mod = node.module or ""
            out += [(node.lineno, f"{mod}.{a.name}" if a.name != "*" else mod) for a in node.names]
        elif isinstance(node, ast.Call) and node.args:
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            arg = node.args[0]
            if (
                name in ("import_module", "__import__")
                and isinstance(arg, ast.Constant)
                and isinstance(arg.value, str)
                and not arg.value.startswith(".")
            ):
                out.append((node.lineno, arg.value))
    return out


def violations(source: str, module: str, where: str, is_package: bool = False) -> list[str]:
    """The imports of ``source`` that break the rule, as ``where:line: ...`` lines."""
    if module in ENTRY_POINTS:
        return []
    own = layer_of(module)
    bad = []
    for line, target in imported_modules(source, module, is_package):
        other = layer_of(target)
        if own is not None and other is not None and other not in ALLOWED[own]:
            bad.append(f"{where}:{line}: {own} module {module} imports {other} module {target}")
    return bad


def source_files(root: Path = ROOT) -> list[Path]:
    files = []
    for folder in FOLDERS:
        for dirpath, dirnames, filenames in os.walk(root / folder):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            files += [Path(dirpath) / f for f in filenames if f.endswith(".py")]
    return sorted(files)


def tree_violations(root: Path = ROOT) -> list[str]:
    bad = []
    for path in source_files(root):
        bad += violations(
            path.read_text(),
            module_name(path, root),
            str(path.relative_to(root)),
            is_package=path.name == "__init__.py",
        )
    return bad


# ---------------------------------------------------------------------------- the tree


def test_every_layer_is_checked():
    names = {module_name(p) for p in source_files()}
    assert {
        "liquid_stream.cli",
        "liquid_stream.nn.model",
        "liquid_stream.training.trainer",
        "liquid_stream.training.data.cli",
        "liquid_stream.export.cli",
        "liquid_stream.apps.kws.cli",
    } <= names
    assert ENTRY_POINTS <= names  # an entry point that no longer exists: update the rule


def test_no_import_breaks_the_layering():
    bad = tree_violations()
    rule = "imports against the layering rule (see this file's docstring):"
    assert not bad, "\n".join([rule, *bad])


def test_cli_and_help_import_no_torch():
    """``import liquid_stream.cli`` and ``liquid-stream --help`` (which lists every
    command, so imports each command's module) leave torch unimported."""
    code = textwrap.dedent("""
        import sys
        import liquid_stream.cli
        assert "torch" not in sys.modules, "import liquid_stream.cli imported torch"
        from click.testing import CliRunner
        r = CliRunner().invoke(liquid_stream.cli.main, ["--help"])
        assert r.exit_code == 0, r.output
        for name in ("train", "evaluate", "data", "export", "kws", "kws-eval", "kws-tune"):
            assert f"  {name} " in r.output, (name, r.output)
        r = CliRunner().invoke(liquid_stream.cli.main, ["data", "--help"])
        assert r.exit_code == 0 and "kws-stream" in r.output, r.output
        heavy = sorted(m for m in ("torch", "onnx", "onnxruntime") if m in sys.modules)
        assert not heavy, f"liquid-stream --help imported {heavy}"
    """)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)


# ------------------------------------------------------------------- the checker itself


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        # the core importing a layer, at module level or inside a function
        ("liquid_stream.nn.model", "import liquid_stream.training.trainer\n", ["core", "training"]),
        (
            "liquid_stream.nn.model",
            "def f():\n    from liquid_stream.export import to_onnx\n",
            ["core", "export"],
        ),
        (
            "liquid_stream.nn.layer",
            "import importlib\nimportlib.import_module('liquid_stream.apps.kws.spotter')\n",
            ["core", "apps"],
        ),
        # apps importing training (relative, three levels up) or export
        (
            "liquid_stream.apps.kws.cli",
            "from ...training.data import speech_synth\n",
            ["apps", "training"],
        ),
        (
            "liquid_stream.apps.kws.spotter",
            "from liquid_stream.export.pipeline import describe\n",
            ["apps", "export"],
        ),
        # training importing export, export importing apps
        (
            "liquid_stream.training.tasks",
            "from liquid_stream import export\n",
            ["training", "export"],
        ),
        ("liquid_stream.export.pipeline", "from ..apps import kws\n", ["export", "apps"]),
        # a package __init__: `from . import x` is x of that package
        ("liquid_stream", "from . import apps\n", ["core", "apps"]),
    ],
)
def test_checker_finds_an_upward_import(module, source, expected):
    bad = violations(source, module, "synthetic.py", is_package=module == "liquid_stream")
    assert len(bad) == 1, bad
    assert f"{expected[0]} module {module} imports {expected[1]} module" in bad[0]


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("liquid_stream.nn.model", "import torch\nfrom .layer import LiquidS4\n"),
        (
            "liquid_stream.training.trainer",
            "from liquid_stream.nn.model import LiquidS4Model\nfrom .data import speech\n",
        ),
        (
            "liquid_stream.export.cli",
            "from .pipeline import describe\n"
            "from liquid_stream.nn.checkpoint import CheckpointError\n",
        ),
        (
            "liquid_stream.apps.kws.spotter",
            "from liquid_stream.runtime.onnx_streamer import OnnxStreamer\n"
            "from .audio import read_wav\n",
        ),
        # the entry points may import every layer
        ("liquid_stream.cli", "from liquid_stream.apps.kws import cli\n"),
        ("liquid_stream.demo", "from liquid_stream.export.pipeline import export_checkpoint\n"),
    ],
)
def test_checker_accepts_allowed_imports(module, source):
    assert violations(source, module, "synthetic.py") == []


@pytest.mark.slow
def test_checker_fails_on_an_upward_import_in_a_copy_of_the_tree(tmp_path):
    """The tree check itself, on a copy of the four folders with one upward import added."""
    import shutil

    for folder in FOLDERS:
        skip = shutil.ignore_patterns("__pycache__", "*.onnx", "*.png")
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=skip)
    assert tree_violations(tmp_path) == []
    target = tmp_path / "liquid_stream" / "runtime" / "validate.py"
    target.write_text(target.read_text() + "\n\ndef _f():\n    from ..apps import kws\n")
    bad = tree_violations(tmp_path)
    assert len(bad) == 1 and bad[0].startswith("liquid_stream/runtime/validate.py:"), bad
    assert (
        "core module liquid_stream.runtime.validate imports apps module liquid_stream.apps.kws"
        in bad[0]
    )
