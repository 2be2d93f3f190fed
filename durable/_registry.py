"""Definitions of workflows and activities, and the process-wide name registry.

`@workflow.defn` / `@activity.defn` attach a definition to the function and
record it by name, so that code can refer to work by function or by name.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .converter import parameter_hints
from .errors import ConfigurationError, NotRegistered

DEFN_ATTR = "__durable_defn__"


@dataclass(frozen=True)
class WorkflowDefn:
    name: str
    fn: Callable[..., Any]
    param_hints: list[Any] = field(default_factory=list)
    return_hint: Any = None


@dataclass(frozen=True)
class ActivityDefn:
    name: str
    fn: Callable[..., Any]
    is_async: bool
    process_isolated: bool = False
    param_hints: list[Any] = field(default_factory=list)
    return_hint: Any = None


_workflows: dict[str, WorkflowDefn] = {}
_activities: dict[str, ActivityDefn] = {}


def define_workflow(fn: Callable[..., Any], name: str | None) -> WorkflowDefn:
    if not inspect.iscoroutinefunction(fn):
        raise ConfigurationError(
            f"@workflow.defn needs an `async def` function, got {fn!r}: workflows are coroutines"
        )
    params, ret = parameter_hints(fn)
    defn = WorkflowDefn(name or fn.__name__, fn, params, ret)
    _workflows[defn.name] = defn
    setattr(fn, DEFN_ATTR, defn)
    return defn


def define_activity(
    fn: Callable[..., Any], name: str | None, process_isolated: bool
) -> ActivityDefn:
    if not callable(fn):
        raise ConfigurationError(f"@activity.defn needs a function, got {fn!r}")
    is_async = inspect.iscoroutinefunction(fn)
    if process_isolated and is_async:
        raise ConfigurationError(
            "process_isolated=True is for sync functions (they run in a child process); "
            "async activities are stopped through their cancel scope"
        )
    params, ret = parameter_hints(fn)
    defn = ActivityDefn(name or fn.__name__, fn, is_async, process_isolated, params, ret)
    _activities[defn.name] = defn
    setattr(fn, DEFN_ATTR, defn)
    return defn


def workflow_defn_of(ref: Callable[..., Any] | str | WorkflowDefn) -> WorkflowDefn | None:
    """The definition behind a function or name, if this process knows it."""
    if isinstance(ref, WorkflowDefn):
        return ref
    if isinstance(ref, str):
        return _workflows.get(ref)
    defn = getattr(ref, DEFN_ATTR, None)
    if isinstance(defn, WorkflowDefn):
        return defn
    raise ConfigurationError(
        f"{ref!r} is not a workflow: decorate it with @durable.workflow.defn or pass its name"
    )


def activity_defn_of(ref: Callable[..., Any] | str | ActivityDefn) -> ActivityDefn | None:
    """The definition behind a function or name, if this process knows it."""
    if isinstance(ref, ActivityDefn):
        return ref
    if isinstance(ref, str):
        return _activities.get(ref)
    defn = getattr(ref, DEFN_ATTR, None)
    if isinstance(defn, ActivityDefn):
        return defn
    raise ConfigurationError(
        f"{ref!r} is not an activity: decorate it with @durable.activity.defn or pass its name"
    )


def workflow_name(ref: Callable[..., Any] | str) -> str:
    defn = workflow_defn_of(ref)
    if defn is not None:
        return defn.name
    assert isinstance(ref, str)
    return ref


def activity_name(ref: Callable[..., Any] | str) -> str:
    defn = activity_defn_of(ref)
    if defn is not None:
        return defn.name
    assert isinstance(ref, str)
    return ref


def require_workflow(ref: Callable[..., Any] | str) -> WorkflowDefn:
    defn = workflow_defn_of(ref)
    if defn is None:
        raise NotRegistered(
            f"unknown workflow {ref!r}: no @workflow.defn with this name is imported in "
            "this process; import the module that defines it"
        )
    return defn


def require_activity(ref: Callable[..., Any] | str) -> ActivityDefn:
    defn = activity_defn_of(ref)
    if defn is None:
        raise NotRegistered(
            f"unknown activity {ref!r}: no @activity.defn with this name is imported in "
            "this process; import the module that defines it"
        )
    return defn
