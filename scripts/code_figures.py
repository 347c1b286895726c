"""The package's size figures that issue 42 bounds, counted the same way every time.

Code lines of ``ledger/``, ``activities/`` and ``workflows/`` (lines holding a token that is
not a comment, a docstring or a blank), the modules over 500 lines and the functions over
80 lines (docstring included), and the public names recorded in ``tests/public_api.json``.

    python scripts/code_figures.py        # the figures
    python scripts/code_figures.py -v     # and every module's code lines
"""

from __future__ import annotations

import ast
import io
import json
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ledger", "activities", "workflows")
_NOT_CODE = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
}
_SCOPES = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _docstring_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, _SCOPES) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def _code_lines(source: str, tree: ast.Module) -> int:
    code: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in _NOT_CODE:
            code.update(range(token.start[0], token.end[0] + 1))
    return len(code - _docstring_lines(tree))


def main() -> None:
    per_module: dict[str, int] = {}
    long_modules: list[tuple[int, str]] = []
    long_functions: list[tuple[int, str]] = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            source = path.read_text()
            tree = ast.parse(source)
            per_module[name] = _code_lines(source, tree)
            if source.count("\n") > 500:
                long_modules.append((source.count("\n"), name))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > 80:
                        long_functions.append((length, f"{name}:{node.name}"))
    api = json.loads((ROOT / "tests" / "public_api.json").read_text())
    print(f"code lines: {sum(per_module.values())}")
    print(f"modules over 500 lines: {len(long_modules)} {sorted(long_modules, reverse=True)}")
    print(f"functions over 80 lines: {len(long_functions)} {sorted(long_functions, reverse=True)}")
    print(f"public names: {sum(len(names) for names in api.values())}")
    if "-v" in sys.argv[1:]:
        for name, lines in sorted(per_module.items(), key=lambda item: -item[1]):
            print(f"{lines:6} {name}")


if __name__ == "__main__":
    main()
