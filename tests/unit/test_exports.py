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
    """The text under every ``## heading`` or ``## heading: more`` (up to the
    next heading), or the whole page."""
    if heading is None:
        return text
    found = re.findall(rf"^## {re.escape(heading)}(?::[^\n]*)?\s*$(.*?)(?=^## |\Z)", text,
                       re.M | re.S)
    assert found, f"docs/api.md has no '## {heading}' section"
    return "\n".join(found)


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
    ("durable.testing", "durable.testing"),
    ("durable.driver", "durable.driver"),
    ("durable.control", "durable.control"),
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


@pytest.mark.parametrize("name", ["ActivityInfo", "ControlPlane", "Page", "Dialect", "Driver",
                                  "register_driver", "NonDeterminismError", "PayloadError",
                                  "NotRegistered"])
def test_a_name_that_left_the_face_still_imports_with_a_warning_naming_its_home(
        name: str) -> None:
    assert name not in durable.__all__
    with pytest.warns(DeprecationWarning, match=rf"durable\.{name} is now durable\.") as warned:
        moved = getattr(durable, name)
    new_home = str(warned[0].message).split(" is now ")[1].split(";")[0].split(" ")[0]
    module, _, new_name = new_home.rpartition(".")
    assert getattr(importlib.import_module(module), new_name) is moved


def test_seam_types_live_on_their_audiences_face_not_the_applications() -> None:
    import durable.control
    import durable.driver

    assert {"Dialect", "Driver", "register_driver"} <= set(durable.driver.__all__)
    assert {"ControlPlane", "Page"} <= set(durable.control.__all__)
    assert "ActivityInfo" in durable.activity.__all__ and "ActivityInfo" not in durable.__all__


def test_error_names_say_what_happened_subject_first() -> None:
    """Only the roots of a family end in Error (see durable/errors.py)."""
    roots = {"DurableError", "ConfigurationError", "ApplicationError"}
    errors = {n for n in durable.__all__ if isinstance(getattr(durable, n), type)
              and issubclass(getattr(durable, n), BaseException)}
    assert {n for n in errors if n.endswith("Error")} == roots
