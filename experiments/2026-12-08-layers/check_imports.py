"""Every ``liquid_stream`` import of the repository resolves (statically, without importing):

    python experiments/2026-12-08-layers/check_imports.py

For each ``.py`` file tracked by git, every import (module level or in a function;
relative ones resolved against the file's package) of a ``liquid_stream...`` module must
name an existing module or package, and ``from M import n`` must name a sub-module of M or
a name that appears in M's source. Prints the ones that do not; exit status 1 if any.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {
    "liquid_stream": "liquid_stream",
    "training": "liquid_stream.training",
    "export": "liquid_stream.export",
    "apps": "liquid_stream.apps",
}


def path_of(module: str) -> Path | None:
    """The file of a ``liquid_stream...`` module (a package's ``__init__.py``), else None."""
    for folder, pkg in sorted(FOLDERS.items(), key=lambda kv: -len(kv[1])):
        if module == pkg or module.startswith(pkg + "."):
            rest = module[len(pkg) :].lstrip(".")
            p = ROOT.joinpath(folder, *rest.split(".")) if rest else ROOT / folder
            if (p / "__init__.py").is_file():
                return p / "__init__.py"
            if p.with_suffix(".py").is_file():
                return p.with_suffix(".py")
            return None
    return None


def module_of(path: str) -> str | None:
    parts = list(Path(path).with_suffix("").parts)
    if parts[0] not in FOLDERS:
        return None
    parts[0] = FOLDERS[parts[0]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def main() -> int:
    files = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    bad = []
    for f in files:
        src = (ROOT / f).read_text()
        try:
            tree = ast.parse(src)
        except SyntaxError as e:
            bad.append(f"{f}: {e}")
            continue
        mod = module_of(f)
        pkg = (
            None if mod is None else (mod if f.endswith("__init__.py") else mod.rpartition(".")[0])
        )
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("liquid_stream") and path_of(a.name) is None:
                        bad.append(f"{f}:{node.lineno}: no module {a.name}")
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    if pkg is None:
                        continue
                    base = pkg.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if not target.startswith("liquid_stream"):
                    continue
                p = path_of(target)
                if p is None:
                    bad.append(f"{f}:{node.lineno}: no module {target}")
                    continue
                text = p.read_text()
                for a in node.names:
                    if a.name == "*" or path_of(f"{target}.{a.name}") is not None:
                        continue
                    if not re.search(rf"\b{re.escape(a.name)}\b", text):
                        bad.append(f"{f}:{node.lineno}: {target} has no {a.name}")
    print("\n".join(bad) or f"{len(files)} files: every liquid_stream import resolves")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
