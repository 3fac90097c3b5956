"""The fenced code blocks of the documentation: README.md and every docs/*.md.

The README keeps the quickstart; the rest of the documentation, its examples
and the coding agents' set-up blocks live under docs/. The tests that run
those blocks read them through here, so a block is found wherever it lives:
``tests/console/test_readme_snippets.py`` runs every runnable one, and
``tests/agents/harness.py`` reads the blocks tagged ``agent=<name>``
(``file=<path>``).

A block opens with a fence and an info string (```` ```sh no-run agent=aider ````:
a language, then words) and closes with a bare fence."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(.*)$")


def doc_files() -> list[Path]:
    """README.md, then every Markdown file under docs/, in path order."""
    return [README, *sorted(DOCS.rglob("*.md"))]


@dataclass(frozen=True)
class Fenced:
    source: str  # the file, relative to the repository: "README.md", "docs/clients.md"
    line: int  # of the opening fence, 1-based
    info: tuple[str, ...]  # the opening fence's info string, split on spaces
    code: str

    @property
    def language(self) -> str:
        return self.info[0] if self.info else ""

    @property
    def words(self) -> tuple[str, ...]:
        """The info string after the language (``no-run``, ``agent=codex`` ...)."""
        return self.info[1:]

    @property
    def options(self) -> dict[str, str]:
        """The ``name=value`` words: ``{"agent": "codex", "file": ".codex/config.toml"}``."""
        return dict(w.split("=", 1) for w in self.words if "=" in w)


def fenced_blocks(text: str, source: str = "README.md") -> list[Fenced]:
    """The fenced blocks of one Markdown text, in order."""
    blocks, opened, body = [], None, []
    for number, line in enumerate(text.splitlines(), start=1):
        m = FENCE.match(line)
        if opened is None:
            if m:
                opened, body = (number, tuple(m.group(1).split())), []
        elif m and not m.group(1).strip():
            first, info = opened
            blocks.append(Fenced(source, first, info, "\n".join(body) + "\n"))
            opened = None
        else:
            body.append(line)
    assert opened is None, f"{source}:{opened[0]}: a code block is never closed"
    return blocks


def _source(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return path.name


def doc_blocks(files: Iterable[Path] | None = None) -> Iterator[Fenced]:
    """The fenced blocks of README.md and docs/*.md (or of ``files``), file by file."""
    for path in doc_files() if files is None else files:
        yield from fenced_blocks(path.read_text(encoding="utf-8"), _source(path))
