"""The layering rule, checked on the source: who may import whom. Folders are layers
(docs/design.md §10)::

    liquid_stream/{cli,main_job,demo}.py: the entry points, may import every layer
    ═══════════════════════════════════════════════════════════════════════════════
    torch                                     │ torch-free
                                              │
    training/ ──▶ training/data/              │  apps/serve/ ──▶ apps/batch/
                      ▲ ▼                     │       │               │
    training/data/{speech,vitals,lra}/        │       ▼               ▼
                                              │  apps/{kws,vitals}/ ──▶ apps/common/
    export/                                   │
                                              │
           all of the above                   │          all of the above
                  │                           │                 │
                  ▼                           │                 │
         liquid_stream/nn/ ───────────────────┼─────────┐       │
                                              │         ▼       ▼
                                              │   liquid_stream/models/
                                              │            │
                                              │            ▼
                                              │   liquid_stream/runtime/
                                              │            │
                                              │            ▼
                                              │   liquid_stream/io/

    A ──▶ B: A may import B and whatever B may import. Nothing else: never up, never
    sideways (apps/kws/ ↮ apps/vitals/, training/ ↮ export/, torch side ↮ apps/).

:data:`TABLE` is the rule: one row per folder (a file belongs to the most specific row
that holds it), its layer and the layers it may import besides its own. The rows
are the picture's arrows, closed: a layer imports only the layers below it in the
picture, never up or sideways; nothing imports the entry points. Every layer may
import the package root ``liquid_stream`` (``__version__``, and its lazy names, which count
as the modules they load: ``from liquid_stream import LiquidS4Model`` is an import of
``liquid_stream.nn.model``). The one cycle is deliberate: ``training/data/`` (the dataset
cache and the ``data`` commands) and its domains import each other.

Torch-free folders (:data:`TORCH_FREE`: ``liquid_stream/io``, ``runtime``, ``models`` and
all of ``apps/``) import neither ``liquid_stream/nn/`` (the table) nor torch, Triton or
KeOps (:data:`TORCH`), anywhere in the file.

- **entry points** (:data:`ENTRY_POINTS`) may import every layer: ``liquid_stream/cli.py``
  (it only wires each package's commands into ``liquid-stream``),
  ``liquid_stream/main_job.py`` (the main job runs the CLI end to end) and
  ``liquid_stream/demo.py`` (the tour trains, exports and streams). A package's own CLI
  module (``training/cli.py``, ``training/data/cli.py``, ``export/cli.py``,
  ``apps/*/cli.py``) is *not* an entry point: it obeys its folder's row.

Every ``.py`` file of the four top folders is parsed with :mod:`ast`; every import counts —
module level or inside a function, ``import a.b``, ``from a import b``, relative imports
(resolved against the file's package) and ``importlib.import_module("...")`` /
``__import__("...")`` with a literal name. Other third-party and standard-library imports
are not constrained here (the torch-free checks below and in tests/apps/kws/test_kws.py,
tests/export/test_onnx.py and tests/runtime/test_runtime_install.py run the code).
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

CORE = {"io", "runtime", "models"}  # the torch-free core
APPS = {"apps", "apps/common"}  # the apps' package and shared helpers
DATA = {"training/data", "training/data/speech", "training/data/vitals", "training/data/lra"}

# folder → (its layer, the layers it may import besides its own). A layer is named by its
# folder; a file belongs to the most specific folder that holds it.
TABLE: dict[str, tuple[str, set[str]]] = {
    # the package root: __init__.py, the lazy public API (its names are checked where used)
    "liquid_stream": ("liquid_stream", set()),
    "liquid_stream/io": ("io", set()),
    "liquid_stream/runtime": ("runtime", {"io"}),
    "liquid_stream/models": ("models", {"io", "runtime"}),
    "liquid_stream/nn": ("nn", {*CORE}),
    "training": ("training", {*CORE, "nn", *DATA}),
    "training/data": ("training/data", {*CORE, "nn", *DATA}),
    "training/data/speech": ("training/data/speech", {*CORE, "nn", "training/data"}),
    "training/data/vitals": ("training/data/vitals", {*CORE, "nn", "training/data"}),
    "training/data/lra": ("training/data/lra", {*CORE, "nn", "training/data"}),
    "export": ("export", {*CORE, "nn"}),
    "apps": ("apps", {*CORE}),
    "apps/common": ("apps/common", {*CORE}),
    "apps/kws": ("apps/kws", {*CORE, *APPS}),
    "apps/vitals": ("apps/vitals", {*CORE, *APPS}),
    "apps/batch": ("apps/batch", {*CORE, *APPS, "apps/kws", "apps/vitals"}),
    "apps/serve": ("apps/serve", {*CORE, *APPS, "apps/kws", "apps/vitals", "apps/batch"}),
}
# the layers that never import torch (nor nn, which the table already says)
TORCH_FREE = {
    "io",
    "runtime",
    "models",
    *(layer for f, (layer, _) in TABLE.items() if f[:4] == "apps"),
}
TORCH = {"torch", "triton", "pykeops"}
ENTRY_POINTS = {"liquid_stream.cli", "liquid_stream.main_job", "liquid_stream.demo"}
ENTRY = "entry point"


def _lazy_names(root: Path = ROOT) -> dict[str, str]:
    """``liquid_stream``'s lazy public API: name → the module it loads (``_EXPORTS``)."""
    tree = ast.parse((root / "liquid_stream" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_EXPORTS":
            return ast.literal_eval(node.value)
    return {}


LAZY = _lazy_names()


def folder_of(module: str) -> str | None:
    """``liquid_stream.apps.kws.cli`` → ``apps/kws/cli`` (the repository path, no suffix);
    None for anything that is not ``liquid_stream...``."""
    parts = module.split(".")
    if parts[0] != "liquid_stream":
        return None
    if len(parts) > 1 and f"liquid_stream.{parts[1]}" in FOLDERS.values():
        return "/".join([parts[1], *parts[2:]])
    return "/".join(parts)


def layer_of(module: str) -> str | None:
    """The layer of a ``liquid_stream...`` module name (:data:`ENTRY` for an entry point);
    None for anything else. A lazy name of the root counts as the module it loads."""
    if module in ENTRY_POINTS:
        return ENTRY
    parts = module.split(".")
    if len(parts) == 2 and parts[1] in LAZY:
        module = LAZY[parts[1]]
    path = folder_of(module)
    if path is None:
        return None
    for folder in sorted(TABLE, key=len, reverse=True):
        if path == folder or path.startswith(folder + "/"):
            return TABLE[folder][0]
    return None


def allowed(layer: str) -> set[str]:
    (row,) = [a for f, (name, a) in TABLE.items() if name == layer]
    return {layer, "liquid_stream", *row}


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
    own = layer_of(module)
    if own == ENTRY:
        return []
    if own is None:
        return [f"{where}: module {module} is in no row of TABLE: add its folder"]
    bad = []
    for line, target in imported_modules(source, module, is_package):
        other = layer_of(target)
        if other is not None and other not in allowed(own):
            bad.append(f"{where}:{line}: {own} module {module} imports {other} module {target}")
        top = target.split(".")[0]
        if own in TORCH_FREE and top in TORCH:
            bad.append(f"{where}:{line}: torch-free {own} module {module} imports {target}")
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


def test_every_folder_is_a_row_and_every_row_a_folder():
    names = {module_name(p) for p in source_files()}
    assert {
        "liquid_stream.cli",
        "liquid_stream.nn.model",
        "liquid_stream.runtime.onnx_streamer",
        "liquid_stream.io.wav",
        "liquid_stream.training.trainer",
        "liquid_stream.training.data.cli",
        "liquid_stream.export.cli",
        "liquid_stream.apps.kws.cli",
    } <= names
    assert ENTRY_POINTS <= names  # an entry point that no longer exists: update the rule
    packages = {str(p.parent.relative_to(ROOT)) for p in source_files() if p.name == "__init__.py"}
    assert packages == set(TABLE), "a package folder without a row, or a row without a folder"
    assert set(LAZY) and all(layer_of(m) in ("nn", "runtime") for m in LAZY.values())


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


def test_torch_free_folders_import_no_torch():
    """Every module of the torch-free folders, imported in one fresh process, leaves torch
    unimported (the table's rule, run)."""
    mods = [module_name(p) for p in source_files() if layer_of(module_name(p)) in TORCH_FREE]
    code = (
        "import importlib, sys\n"
        f"for m in {mods!r}:\n"
        "    importlib.import_module(m)\n"
        "    assert 'torch' not in sys.modules, m\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)


# ------------------------------------------------------------------- the checker itself


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        # a lower layer importing a higher one, at module level or inside a function
        ("liquid_stream.nn.model", "import liquid_stream.training.trainer\n", ["nn", "training"]),
        (
            "liquid_stream.nn.model",
            "def f():\n    from liquid_stream.export import to_onnx\n",
            ["nn", "export"],
        ),
        (
            "liquid_stream.nn.layer",
            "import importlib\nimportlib.import_module('liquid_stream.apps.kws.spotter')\n",
            ["nn", "apps/kws"],
        ),
        # the torch-free core importing nn, or io importing runtime
        ("liquid_stream.runtime.onnx_streamer", "from ..nn import model\n", ["runtime", "nn"]),
        ("liquid_stream.io.wfdb", "from liquid_stream.runtime import meta\n", ["io", "runtime"]),
        # an app importing nn through the root's lazy name
        (
            "liquid_stream.apps.vitals.monitor",
            "from liquid_stream import LiquidS4\n",
            ["apps/vitals", "nn"],
        ),
        # apps importing training (relative, three levels up) or export
        (
            "liquid_stream.apps.kws.cli",
            "from ...training.data import speech_synth\n",
            ["apps/kws", "training/data"],
        ),
        (
            "liquid_stream.apps.kws.spotter",
            "from liquid_stream.export.pipeline import describe\n",
            ["apps/kws", "export"],
        ),
        # one app domain importing another, sideways or up
        (
            "liquid_stream.apps.kws.spotter",
            "from ..vitals import monitor\n",
            ["apps/kws", "apps/vitals"],
        ),
        (
            "liquid_stream.apps.common.audio",
            "from ..kws import spotter\n",
            ["apps/common", "apps/kws"],
        ),
        (
            "liquid_stream.apps.batch.kws",
            "from ..serve import server\n",
            ["apps/batch", "apps/serve"],
        ),
        # one data domain importing another
        (
            "liquid_stream.training.data.lra.images",
            "from ..speech import speech\n",
            ["training/data/lra", "training/data/speech"],
        ),
        # training importing export, export importing apps
        (
            "liquid_stream.training.tasks",
            "from liquid_stream import export\n",
            ["training", "export"],
        ),
        ("liquid_stream.export.pipeline", "from ..apps import kws\n", ["export", "apps/kws"]),
        # a package __init__: `from . import x` is x of that package
        ("liquid_stream", "from . import apps\n", ["liquid_stream", "apps"]),
    ],
)
def test_checker_finds_an_upward_import(module, source, expected):
    bad = violations(source, module, "synthetic.py", is_package=module == "liquid_stream")
    assert len(bad) == 1, bad
    assert f"{expected[0]} module {module} imports {expected[1]} module" in bad[0]


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("liquid_stream.runtime.meta", "def f():\n    import torch\n"),
        ("liquid_stream.apps.serve.server", "import torch.nn\n"),
        ("liquid_stream.io.lsl", "from triton import language\n"),
    ],
)
def test_checker_finds_torch_in_a_torch_free_folder(module, source):
    bad = violations(source, module, "synthetic.py")
    assert len(bad) == 1 and "torch-free" in bad[0], bad


def test_layer_of_new_folders_and_lazy_names():
    # a folder without a row counts as its parent's (test_every_folder_... asks for a row)
    assert layer_of("liquid_stream.apps.newdomain.x") == "apps"
    assert layer_of("liquid_stream.newthing") == "liquid_stream"  # may import nothing
    assert violations("from .runtime import meta\n", "liquid_stream.newthing", "new.py")
    assert layer_of("liquid_stream.training.data.speech.speech") == "training/data/speech"
    assert layer_of("liquid_stream.OnnxStreamer") == "runtime"


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("liquid_stream.nn.model", "import torch\nfrom .layer import LiquidS4\n"),
        ("liquid_stream.nn.checkpoint", "from ..io.atomic import atomic_open\n"),
        ("liquid_stream.nn.model", "from ..runtime.validate import check_dtype\n"),
        (
            "liquid_stream.training.trainer",
            "from liquid_stream.nn.model import LiquidS4Model\nfrom .data import tones\n",
        ),
        ("liquid_stream.training.data.speech.speech_synth", "from .. import cache\n"),
        ("liquid_stream.training.data.cli", "from .vitals import bidmc_sim\n"),
        (
            "liquid_stream.export.cli",
            "from .pipeline import describe\n"
            "from liquid_stream.nn.checkpoint import CheckpointError\n",
        ),
        (
            "liquid_stream.apps.kws.spotter",
            "from liquid_stream.runtime.onnx_streamer import OnnxStreamer\n"
            "from ..common.audio import read_wav\nfrom liquid_stream import OnnxStreamer\n",
        ),
        (
            "liquid_stream.apps.serve.server",
            "from ..batch import KwsBank\nfrom ..vitals import alarms\n",
        ),
        ("liquid_stream.apps.vitals.cli", "from liquid_stream.models import shipped\n"),
        ("liquid_stream.export.pipeline", "from liquid_stream import __version__\n"),
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
    target.write_text(target.read_text() + "\n\ndef _f():\n    from ..nn import model\n")
    bad = tree_violations(tmp_path)
    assert len(bad) == 1 and bad[0].startswith("liquid_stream/runtime/validate.py:"), bad
    assert "runtime module liquid_stream.runtime.validate imports nn module" in bad[0]
