"""The Python blocks of README.md and docs/*.md, with their docs-test annotations.

A block is a fenced ```python block (indented ones too, as in list items).
The line right before its fence may annotate it, visibly in the markdown:

    <!-- docs-test: setup=imports,order continues run=check_x -->

Keys (space-separated, values without spaces or in double quotes):

- ``setup=a,b``: named setups (tests/docs_setups.py SETUPS) run first, in the
  block's namespace: imports the page states once, a definition the block uses.
- ``continues`` / ``continues=NAME``: the block runs after the previous block
  of the same file (or the earlier one annotated ``name=NAME``), in its namespace, as
  if the two were one file (that block, with its own annotations, runs again
  first: each test is a process of its own).
- ``prelude``: on a page's "the samples assume" block: it runs first, in the
  same namespace, before every later block of the file.
- ``module=NAME``: "save this as NAME.py": later blocks of the file can
  ``import NAME`` (the file is written to the test's working directory).
- ``file=NAME``: the block is a file of its own (a test module): it is saved
  as NAME in the working directory and not run as a program; a ``run=``
  check runs it (pytest, for a test module).
- ``run=NAME``: after the block, the named check (tests/docs_setups.py CHECKS)
  drives what it defined: starts its workflows with a real worker, compares
  what it prints with what the page says.
- ``backends=asyncio,trio``: host loops for ``run=`` checks and for blocks
  with top-level ``await`` (default: both).
- ``postgres``: the block talks to PostgreSQL: every ``postgresql://`` URL in
  it is replaced by the test server's URL with a fresh schema (dropped after);
  ``postgres=server``: by the server's URL alone (for plain asyncpg code).
- ``requires=dotted.name``: skip, saying so, while that name does not exist
  (for documented features that are being added).
- ``skip reason="..."``: the block cannot run here; the reason says why.
"""

from __future__ import annotations

import re
import shlex
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_ANNOTATION = re.compile(r"^\s*<!--\s*docs-test:(?P<body>.*?)-->\s*$")
KNOWN_KEYS = {"setup", "continues", "prelude", "name", "module", "file", "run", "backends",
              "postgres", "requires", "skip", "reason"}


@dataclass
class Block:
    path: Path
    line: int                     # the line of the opening fence, 1-based
    source: str
    options: dict[str, str] = field(default_factory=dict)
    previous: Block | None = None  # the file's previous Python block

    @property
    def id(self) -> str:
        return f"{_label(self.path)}:{self.line}"

    def continued(self) -> Block | None:
        """The block this one continues, if it does."""
        if "continues" not in self.options:
            return None
        name = self.options["continues"]
        found = self.previous
        while found is not None and name and found.options.get("name") != name:
            found = found.previous
        if found is None:
            raise ValueError(f"{self.id}: continues={name or '(previous)'}: no such earlier block")
        return found

    def names(self, key: str) -> list[str]:
        return [n for n in self.options.get(key, "").split(",") if n]


def _label(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def doc_files() -> list[Path]:
    """README.md and every page at the top of docs/ (not docs/design/)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def parse_annotation(text: str, where: str) -> dict[str, str]:
    options: dict[str, str] = {}
    for word in shlex.split(text):
        key, _, value = word.partition("=")
        if key not in KNOWN_KEYS:
            raise ValueError(f"{where}: unknown docs-test key {key!r}; known: "
                             f"{', '.join(sorted(KNOWN_KEYS))}")
        options[key] = value
    if "skip" in options and not options.get("reason"):
        raise ValueError(f'{where}: docs-test skip needs reason="why this block cannot run"')
    return options


def blocks_of(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, info = opening["fence"], opening["info"].strip()
        end = i + 1
        while end < len(lines) and not (lines[end].strip().startswith(fence)
                                        and lines[end].strip().strip(fence[0]) == ""):
            end += 1
        if info.split(" ")[0] in ("python", "py"):
            where = f"{_label(path)}:{i + 1}"
            before = lines[i - 1] if i > 0 else ""
            note = _ANNOTATION.match(before)
            options = parse_annotation(note["body"], where) if note else {}
            source = textwrap.dedent("\n".join(lines[i + 1:end])) + "\n"
            found.append(Block(path, i + 1, source, options, found[-1] if found else None))
        i = end + 1
    return found


def all_blocks() -> list[Block]:
    return [block for path in doc_files() for block in blocks_of(path)]
