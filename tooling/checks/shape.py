"""The code's shape, as the house rules set it (docs/architecture.md, "House rules"):
no module over 500 lines, no function over 60, and every import inside a function
with a one-line reason (a comment on its line or the line above).

    python -m tooling.checks.shape [PATH ...]     # prints each breach; exit 1 if any

Checked: the product's packages and tooling/, less migrations (generated)."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "console", "accounts", "usage", "invoicing", "gateway_bridge", "inference_node", "tooling",
)
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


class Breach(NamedTuple):
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def modules(paths: list[str] | None = None) -> Iterator[Path]:
    roots = [ROOT / p for p in (paths or PACKAGES)]
    for root in roots:
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for path in files:
            if "migrations" not in path.parts:
                yield path


def _has_reason(lines: list[str], lineno: int) -> bool:
    line = lines[lineno - 1]
    above = lines[lineno - 2].strip() if lineno >= 2 else ""
    return "#" in line or above.startswith("#")


def breaches(path: Path) -> Iterator[Breach]:
    text = path.read_text()
    lines = text.splitlines()
    name = str(path.relative_to(ROOT))
    if len(lines) > MAX_MODULE_LINES:
        yield Breach(name, 1, f"module of {len(lines)} lines (at most {MAX_MODULE_LINES})")
    tree = ast.parse(text, filename=name)
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        length = (node.end_lineno or node.lineno) - start + 1
        if length > MAX_FUNCTION_LINES:
            limit = f"at most {MAX_FUNCTION_LINES}"
            yield Breach(name, node.lineno, f"function {node.name} of {length} lines ({limit})")
        for inner in ast.walk(node):
            if not isinstance(inner, ast.Import | ast.ImportFrom):
                continue
            if not _has_reason(lines, inner.lineno):
                what = f"import inside {node.name} with no reason given"
                yield Breach(name, inner.lineno, what)


def main(argv: list[str]) -> int:
    found = [b for path in modules(argv or None) for b in breaches(path)]
    for breach in found:
        print(breach)
    print(f"{len(found)} breaches", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
