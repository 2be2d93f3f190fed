"""The registries: one definition per name, references by function or by name."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import durable
import durable.testing
from durable import ConfigurationError, NameNotRegistered, activity, workflow
from durable._registry import (
    DEFINITIONS,
    ActivityDefn,
    Registry,
    WorkflowDefn,
    activity_defn_of,
    require_activity,
    workflow_defn_of,
    workflow_name,
)


def unique(prefix: str) -> str:
    """A name no other test registers (the process-wide registry outlives tests)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def first(x: int) -> int:
    return x


async def second(x: int) -> int:
    return -x


def test_two_functions_under_one_name_are_an_error_naming_both() -> None:
    registry = Registry()
    registry.add_workflow(WorkflowDefn("same", first))
    with pytest.raises(ConfigurationError) as err:
        registry.add_workflow(WorkflowDefn("same", second))
    message = str(err.value)
    assert f"{__name__}.first" in message and f"{__name__}.second" in message
    assert "'same'" in message and "@workflow.defn(name=...)" in message
    assert registry.workflows["same"].fn is first  # the first one stays


def test_activities_and_workflows_have_separate_namespaces() -> None:
    registry = Registry()
    registry.add_workflow(WorkflowDefn("x", first))
    registry.add_activity(ActivityDefn("x", second, is_async=True))
    with pytest.raises(ConfigurationError, match="two different activities are named 'x'"):
        registry.add_activity(ActivityDefn("x", first, is_async=True))


def test_registering_the_same_function_again_is_allowed() -> None:
    registry = Registry()
    registry.add_activity(ActivityDefn("a", first, is_async=True))
    registry.add_activity(ActivityDefn("a", first, is_async=True, process_isolated=False))
    assert registry.activities["a"].fn is first


MODULE = textwrap.dedent('''
    from durable import activity, workflow

    @workflow.defn(name={wf!r})
    async def flow() -> None:
        pass

    @activity.defn(name={act!r})
    def step() -> None:
        pass
''')


def _import(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module


def test_importing_a_module_twice_redefines_the_same_functions(tmp_path: Path) -> None:
    """The same file and qualname (``tests.app`` and ``app``, or a reload) is one
    definition, even though the function objects differ."""
    wf, act = unique("reimported-wf"), unique("reimported-act")
    path = tmp_path / "app_module.py"
    path.write_text(MODULE.format(wf=wf, act=act))
    one = _import(path, "app_module")
    two = _import(path, "pkg.app_module")
    assert one.flow is not two.flow
    assert DEFINITIONS.workflows[wf].fn is two.flow  # the later import wins
    assert DEFINITIONS.activities[act].fn is two.step


def test_decorating_another_function_with_a_taken_name_raises() -> None:
    name = unique("taken")

    @workflow.defn(name=name)
    async def original() -> None:
        pass

    with pytest.raises(ConfigurationError, match="original") as err:
        @workflow.defn(name=name)
        async def impostor() -> None:
            pass

    assert "impostor" in str(err.value)

    @activity.defn(name=name)  # an activity may share a workflow's name
    def step() -> None:
        pass

    with pytest.raises(ConfigurationError, match="two different activities"):
        @activity.defn(name=name)
        def other_step() -> None:
            pass


def test_a_second_version_of_a_workflow_is_refused_naming_how_tests_hold_two() -> None:
    """Typical in a test of a workflow's next version: the same name, changed code."""
    name = unique("versioned")

    @workflow.defn(name=name)
    async def before_the_change() -> str:
        return "v1"

    with pytest.raises(ConfigurationError) as err:
        @workflow.defn(name=name)
        async def after_the_change() -> str:
            return "v2"

    assert "durable.testing.isolated_definitions()" in str(err.value)
    assert DEFINITIONS.workflows[name].fn is before_the_change  # nothing was replaced

    with durable.testing.isolated_definitions() as isolated:  # how a test holds both
        @workflow.defn(name=name)
        async def next_version() -> str:
            return "v2"

        assert workflow_defn_of(name) is isolated.workflows[name]
        assert workflow_defn_of(name).fn is next_version  # type: ignore[union-attr]
    assert workflow_defn_of(name).fn is before_the_change  # type: ignore[union-attr]


def test_a_worker_given_two_versions_is_told_to_rename_not_to_isolate() -> None:
    name = unique("both")
    with durable.testing.isolated_definitions():
        @workflow.defn(name=name)
        async def one() -> None:
            pass
    with durable.testing.isolated_definitions():
        @workflow.defn(name=name)
        async def two() -> None:
            pass
    with pytest.raises(ConfigurationError, match="another name") as err:
        Registry.of([one, two], [])
    assert "isolated_definitions" not in str(err.value)


def test_decorators_refuse_what_cannot_run() -> None:
    with pytest.raises(ConfigurationError, match="needs an `async def`"):
        workflow.defn(lambda: None)
    with pytest.raises(ConfigurationError, match="process_isolated=True is for sync"):
        @activity.defn(name=unique("iso"), process_isolated=True)
        async def isolated() -> None:
            pass


@workflow.defn(name="unit-registry-flow")
async def registered_flow(x: int) -> int:
    return x


@activity.defn(name="unit-registry-step")
async def registered_step(x: int) -> int:
    return x


def test_references_by_function_or_by_name_find_the_definition() -> None:
    defn = workflow_defn_of(registered_flow)
    assert defn is not None and defn.name == "unit-registry-flow"
    assert defn.param_hints == [int] and defn.return_hint is int
    assert workflow_defn_of("unit-registry-flow") is defn
    assert workflow_defn_of(defn) is defn
    assert workflow_name(registered_flow) == "unit-registry-flow"
    assert workflow_name("known-only-to-a-worker") == "known-only-to-a-worker"
    assert workflow_defn_of("known-only-to-a-worker") is None
    adefn = require_activity("unit-registry-step")
    assert adefn is activity_defn_of(registered_step) and adefn.is_async


def test_unknown_or_undecorated_references_are_refused() -> None:
    with pytest.raises(NameNotRegistered, match="unknown activity 'nope'"):
        require_activity("nope")
    with pytest.raises(ConfigurationError, match="is not a workflow"):
        workflow_defn_of(len)
    with pytest.raises(ConfigurationError, match="is not an activity"):
        activity_defn_of(registered_flow)


def test_registry_of_is_the_subset_given() -> None:
    registry = Registry.of([registered_flow], ["unit-registry-step"])
    assert set(registry.workflows) == {"unit-registry-flow"}
    assert set(registry.activities) == {"unit-registry-step"}
    with pytest.raises(ConfigurationError, match="workflow 'missing'"):
        Registry.of(["missing"], [])
    with pytest.raises(ConfigurationError, match="activity 'missing'"):
        Registry.of([], ["missing"])


@pytest.fixture
async def memory_client() -> AsyncIterator[durable.Client]:
    async with durable.connect("sqlite://:memory:") as client:
        yield client


@pytest.mark.anyio
async def test_a_worker_knows_only_what_it_was_given(memory_client: durable.Client) -> None:
    worker = durable.Worker(memory_client, workflows=[registered_flow],
                            activities=[registered_step])
    assert set(worker.registry.workflows) == {"unit-registry-flow"}
    assert set(worker.registry.activities) == {"unit-registry-step"}
    assert worker.workflows is worker.registry.workflows  # one registry, not a copy
    assert len(DEFINITIONS.workflows) > 1  # the process knows more than this worker
    by_name: Any = durable.Worker(memory_client, workflows=["unit-registry-flow"])
    assert by_name.registry.workflows["unit-registry-flow"].fn is registered_flow


# ---------------------------------------------------------------- arguments


def test_a_definition_knows_how_many_arguments_it_takes() -> None:
    async def two(a: int, b: int = 0) -> None: ...

    async def many(a: int, *rest: int) -> None: ...

    with durable.testing.isolated_definitions():
        for fn in (two, many):
            workflow.defn(fn)
        two_defn, many_defn = workflow_defn_of(two), workflow_defn_of(many)
    assert two_defn is not None and two_defn.arity is not None
    two_defn.arity.check("workflow 'two'", 1)
    two_defn.arity.check("workflow 'two'", 2)
    with pytest.raises(ConfigurationError, match=(
            r"^workflow 'two' takes 1 to 2 arguments \(a, b\), got 3; pass its arguments")):
        two_defn.arity.check("workflow 'two'", 3)
    assert many_defn is not None and many_defn.arity is not None
    many_defn.arity.check("workflow 'many'", 9)
    with pytest.raises(ConfigurationError, match=r"takes at least 1 argument \(a\), got 0"):
        many_defn.arity.check("workflow 'many'", 0)


def test_a_class_workflows_arguments_leave_out_self() -> None:
    with durable.testing.isolated_definitions():
        @workflow.defn
        class Greeter:
            @workflow.run
            async def run(self, name: str) -> str:
                return name

        defn = workflow_defn_of(Greeter)
    assert defn is not None and defn.arity is not None
    with pytest.raises(ConfigurationError, match=r"takes 1 argument \(name\), got 2"):
        defn.arity.check("workflow 'Greeter'", 2)


def test_an_empty_name_is_refused_rather_than_replaced() -> None:
    with pytest.raises(ConfigurationError, match="workflow name must not be empty"):
        workflow.defn(name="")(first)
    with pytest.raises(ConfigurationError, match="activity name must not be empty"):
        activity.defn(name="")(second)
