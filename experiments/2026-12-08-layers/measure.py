"""The 10 largest .py files (lines) and the 10 longest functions/classes (lines, via ast)
under liquid_stream/, training/, export/ and apps/ — run from the repository root:

    python experiments/2026-12-08-layers/measure.py
"""

from __future__ import annotations

import ast
from pathlib import Path

FOLDERS = ("liquid_stream", "training", "export", "apps")


def main() -> None:
    files = sorted(
        p for f in FOLDERS for p in Path(f).rglob("*.py") if "__pycache__" not in p.parts
    )
    sizes = sorted(((len(p.read_text().splitlines()), str(p)) for p in files), reverse=True)
    defs = []
    for p in files:
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                kind = "class" if isinstance(node, ast.ClassDef) else "def"
                n = node.end_lineno - node.lineno + 1
                defs.append((n, f"{p}:{node.lineno} {kind} {node.name}"))
    defs.sort(reverse=True)
    print(f"files: {len(files)}, lines: {sum(n for n, _ in sizes)}\n")
    print("| lines | file |\n|---:|---|")
    for n, name in sizes[:10]:
        print(f"| {n} | {name} |")
    print("\n| lines | function / class |\n|---:|---|")
    for n, name in defs[:10]:
        print(f"| {n} | {name} |")


if __name__ == "__main__":
    main()
