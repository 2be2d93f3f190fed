"""The docs cannot drift: every Python block in README.md and docs/*.md runs here.

One test per block, named ``file:line``. How a block runs (its setup, whether
it continues the previous block, what drives it afterwards) is written in the
markdown itself, in a ``<!-- docs-test: ... -->`` comment right before the
fence: see tests/docs_blocks.py for the keys, tests/docs_setups.py for the
named setups and checks. Each block runs in a process of its own
(tests/docs_runner.py), in a temporary working directory, so files it
creates (``hello.db``) and names it registers stay its own.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import docs_runner
import pytest
from conftest import POSTGRES_URL, drop_postgres_schema, new_postgres_url, require_postgres
from docs_blocks import Block, all_blocks, blocks_of, parse_annotation
from docs_setups import CHECKS, SETUPS

BLOCKS = all_blocks()
TIMEOUT = 120.0
_POSTGRES_URL = re.compile(r"postgres(?:ql)?://[^\"'\s]+")


def _exists(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _chain(block: Block) -> list[dict[str, Any]]:
    """The steps a block's process runs: files earlier blocks asked to be
    saved as modules, then the blocks it continues, then the block."""
    steps: list[dict[str, Any]] = []
    run: list[Block] = [block]
    while (continued := run[0].continued()) is not None:
        run.insert(0, continued)
    earlier = run[0].previous
    while earlier is not None:
        if "prelude" in earlier.options:
            steps.insert(0, {"label": earlier.id, "source": earlier.source,
                             "setups": earlier.names("setup")})
        elif earlier.options.get("module"):
            steps.insert(0, {"label": earlier.id, "source": earlier.source, "setups": [],
                             "module": earlier.options["module"], "write_only": True})
        earlier = earlier.previous
    for b in run:
        steps.append({"label": b.id, "source": b.source, "setups": b.names("setup"),
                      "module": b.options.get("module"), "file": b.options.get("file"),
                      "last": b is block})
    return steps


def test_every_annotation_names_a_known_setup_and_check() -> None:
    for block in BLOCKS:
        assert set(block.names("setup")) <= set(SETUPS), f"{block.id}: unknown setup"
        assert set(block.names("run")) <= set(CHECKS), f"{block.id}: unknown check"
        assert set(block.names("backends")) <= {"asyncio", "trio"}, f"{block.id}: backends"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_doc_block(block: Block, tmp_path: Path) -> None:
    if "skip" in block.options:
        pytest.skip(f"{block.id}: {block.options['reason']}")
    required = block.options.get("requires")
    if required and not _exists(required):
        pytest.skip(f"{block.id} documents {required}, which does not exist yet")
    steps = _chain(block)
    replace: dict[str, str] = {}
    postgres_url = None
    if "postgres" in block.options:
        require_postgres()
        postgres_url = new_postgres_url()
        server_only = block.options["postgres"] == "server"
        for step in steps:
            for found in _POSTGRES_URL.findall(step["source"]):
                replace[found] = POSTGRES_URL if server_only else postgres_url
    backends = block.names("backends") or ["asyncio", "trio"]
    try:
        passed, output, error = docs_runner.run(
            steps, workdir=tmp_path, replace=replace, checks=block.names("run"),
            backends=backends, timeout=TIMEOUT)
    finally:
        if postgres_url is not None:
            drop_postgres_schema(postgres_url)
    if output:
        print(output)
    if not passed:
        pytest.fail(f"{block.id} failed:\n{error}\n--- output ---\n{output}", pytrace=False)


def test_an_annotation_with_an_unknown_key_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="unknown docs-test key 'setpu'"):
        parse_annotation("setpu=imports", "docs/x.md:3")


def test_a_skip_without_a_reason_is_refused() -> None:
    with pytest.raises(ValueError, match='skip needs reason="'):
        parse_annotation("skip", "docs/x.md:3")


def test_blocks_are_found_with_their_fence_line_and_annotation(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# t\n\n<!-- docs-test: setup=imports continues -->\n  ```python\n"
                    "  x = 1\n  ```\n\n```console\n$ ls\n```\n```py\ny = 2\n```\n")
    found = blocks_of(page)
    assert [(b.line, b.source, b.options) for b in found] == [
        (4, "x = 1\n", {"setup": "imports", "continues": ""}), (11, "y = 2\n", {})]
