"""The public surface: every exported name is importable and documented in docs/api.md."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType

import pytest

import durable

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def _section(text: str, heading: str | None) -> str:
    """The text under a ``## heading`` (up to the next one), or the whole page."""
    if heading is None:
        return text
    match = re.search(rf"^## {re.escape(heading)}\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match is not None, f"docs/api.md has no '## {heading}' section"
    return match.group(1)


def _code_names(text: str) -> set[str]:
    """Identifiers that appear inside `code spans` (and ```blocks```)."""
    names: set[str] = set()
    for span in re.findall(r"```.*?```|`[^`\n]+`", text, re.S):
        names.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", span))
    return names


SURFACES: list[tuple[str, str | None]] = [
    ("durable", None),
    ("durable.workflow", "durable.workflow"),
    ("durable.activity", "durable.activity"),
]


@pytest.mark.parametrize(("module_name", "heading"), SURFACES)
def test_every_exported_name_is_importable(module_name: str, heading: str | None) -> None:
    module: ModuleType = importlib.import_module(module_name)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported)), f"{module_name}.__all__ repeats a name"
    missing = [n for n in exported if not hasattr(module, n)]
    assert missing == [], f"{module_name}.__all__ names what it does not define: {missing}"
    namespace: dict[str, object] = {}
    exec(f"from {module_name} import *", namespace)  # what users write
    assert set(exported) <= set(namespace)


@pytest.mark.parametrize(("module_name", "heading"), SURFACES)
def test_every_exported_name_is_documented(module_name: str, heading: str | None) -> None:
    module = importlib.import_module(module_name)
    documented = _code_names(_section(API_DOC.read_text(encoding="utf-8"), heading))
    where = f"the '## {heading}' section of " if heading else ""
    undocumented = sorted(set(module.__all__) - documented)
    assert undocumented == [], (
        f"{module_name}.__all__ names missing from {where}docs/api.md: {undocumented}")


def test_the_version_is_the_packages() -> None:
    from importlib.metadata import version

    assert durable.__version__ == version("durable-sdk")
