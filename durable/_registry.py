"""Definitions of workflows and activities, and the registries that name them.

`@workflow.defn` / `@activity.defn` attach a definition to the function and
record it by name in the process-wide registry, so that code can refer to
work by function or by name. A `Worker` keeps a `Registry` of its own: the
subset of definitions it runs. In both, a name means one definition:
registering a different function under a taken name is an error, not a
silent overwrite (re-importing the same module is fine).
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from . import _validate
from ._runtime.handlers import ClassSpec, inspect_class
from .converter import parameter_hints
from .errors import ConfigurationError, NameNotRegistered

DEFN_ATTR = "__durable_defn__"


@dataclass(frozen=True)
class WorkflowDefn:
    """A workflow: an ``async def``, or a class with one ``@workflow.run`` method
    (`fn` is then that method, `spec` the class and its handler methods)."""

    name: str
    fn: Callable[..., Any]
    param_hints: list[Any] = field(default_factory=list)
    return_hint: Any = None
    spec: ClassSpec | None = None
    #: how many positional arguments it takes (`arity`): checked where it is started
    arity: Arity | None = None


@dataclass(frozen=True)
class ActivityDefn:
    name: str
    fn: Callable[..., Any]
    is_async: bool
    process_isolated: bool = False
    param_hints: list[Any] = field(default_factory=list)
    return_hint: Any = None
    #: how many positional arguments it takes (`arity`): checked where it is called
    arity: Arity | None = None


@dataclass(frozen=True)
class Arity:
    """The positional arguments a workflow or activity function takes: at least
    `least`, at most `most` (None: any number, ``*args``), named `names`."""

    least: int
    most: int | None
    names: tuple[str, ...]

    def check(self, what: str, count: int) -> None:
        """Refuse `count` arguments, at the call that passes them, before anything
        is recorded: a run or an attempt would fail with Python's TypeError far
        from its cause (an activity's after every retry)."""
        if count >= self.least and (self.most is None or count <= self.most):
            return
        if self.most is None:
            takes = f"at least {self.least}"
        elif self.least == self.most:
            takes = str(self.least)
        else:
            takes = f"{self.least} to {self.most}"
        plural = "" if takes.endswith(" 1") or takes == "1" else "s"
        listed = f" ({', '.join(self.names)})" if self.names else ""
        raise ConfigurationError(
            f"{what} takes {takes} argument{plural}{listed}, got {count}; pass its "
            "arguments positionally after it, as its function lists them")


def arity(fn: Callable[..., Any], skip: int = 0) -> Arity | None:
    """`fn`'s `Arity` (its first `skip` parameters left out: a method's self);
    None when it has no readable signature."""
    try:
        parameters = list(inspect.signature(fn).parameters.values())[skip:]
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p for p in parameters if p.kind in kinds]
    varargs = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters)
    return Arity(sum(1 for p in positional if p.default is inspect.Parameter.empty),
                 None if varargs else len(positional), tuple(p.name for p in positional))


def check_handler_arguments(defn: WorkflowDefn, kind: str, name: str, count: int) -> None:
    """Refuse, at the client's call, arguments the class workflow's handler
    method for (kind, name) does not take: a signal's would fail the run when
    delivered. A handler it does not declare may be registered at run time
    (`workflow.on_signal`): not checked."""
    spec = defn.spec
    found = spec.handlers.get((kind, name)) if spec is not None else None
    takes = None if spec is None or found is None else arity(getattr(spec.cls, found[0]), skip=1)
    if takes is not None:
        takes.check(f"the {kind} {name!r} of workflow {defn.name!r}", count)


Defn = TypeVar("Defn", WorkflowDefn, ActivityDefn)


def _origin(fn: Callable[..., Any]) -> tuple[str, str]:
    """Where a function was defined: the same definition imported twice (as
    ``tests.app`` and as ``app``, or reloaded) has the same origin."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    filename = code.co_filename if code is not None else getattr(fn, "__module__", "?")
    return filename, getattr(fn, "__qualname__", repr(fn))


_PLURAL = {"workflow": "workflows", "activity": "activities"}


def _add(table: dict[str, Defn], defn: Defn, what: str, *, process_wide: bool) -> None:
    existing = table.get(defn.name)
    if existing is not None and existing.fn is not defn.fn and (
        _origin(existing.fn) != _origin(defn.fn)
    ):
        # Typical in a test of a new version of a workflow: say how to do that.
        tests = (f" A test that holds two versions of one {what} (the code before and "
                 "after a change) defines each inside `with "
                 "durable.testing.isolated_definitions():`, which gives the block a registry "
                 "of its own.") if process_wide else ""
        raise ConfigurationError(
            f"two different {_PLURAL[what]} are named {defn.name!r} ({existing.fn.__module__}."
            f"{existing.fn.__qualname__} and {defn.fn.__module__}.{defn.fn.__qualname__}); "
            f"give one of them another name with @{what}.defn(name=...).{tests}"
        )
    table[defn.name] = defn


def describe_definition(defn: WorkflowDefn | ActivityDefn) -> dict[str, Any]:
    """What code stands behind a name: module, qualified name and signature, and
    their fingerprint (the same on every host for the same code; the file's
    path is left out, it differs between hosts). Recorded with a worker's
    registration, so two workers serving one name with different code are
    found (`durable.store.workers.clashes`)."""
    fn = inspect.unwrap(defn.fn)
    module = str(getattr(fn, "__module__", None) or "?")
    qualname = str(getattr(fn, "__qualname__", None) or repr(fn))
    try:
        signature = str(inspect.signature(fn))
    except (TypeError, ValueError):  # a builtin without a signature
        signature = "(...)"
    digest = hashlib.sha256(f"{module}\n{qualname}\n{signature}".encode()).hexdigest()[:16]
    described: dict[str, Any] = {"module": module, "qualname": qualname,
                                 "signature": signature, "fingerprint": digest}
    if defn.arity is not None:  # lets a start by name be checked where it is made
        described["arity"] = {"least": defn.arity.least, "most": defn.arity.most,
                              "names": list(defn.arity.names)}
    return described


def arity_described(described: Any) -> Arity | None:
    """The `Arity` a worker registered for a name (`describe_definition`); None
    when it registered none (an older worker, or no readable signature)."""
    found = described.get("arity") if isinstance(described, dict) else None
    if not isinstance(found, dict):
        return None
    try:
        return Arity(int(found["least"]), None if found["most"] is None else int(found["most"]),
                     tuple(str(n) for n in found.get("names") or ()))
    except (KeyError, TypeError, ValueError):
        return None


class Registry:
    """Workflows and activities by name; one definition per name."""

    def __init__(self, *, process_wide: bool = False) -> None:
        self.workflows: dict[str, WorkflowDefn] = {}
        self.activities: dict[str, ActivityDefn] = {}
        # the registry decorators write to (`DEFINITIONS`), as opposed to a worker's
        self.process_wide = process_wide

    def add_workflow(self, defn: WorkflowDefn) -> None:
        _add(self.workflows, defn, "workflow", process_wide=self.process_wide)

    def add_activity(self, defn: ActivityDefn) -> None:
        _add(self.activities, defn, "activity", process_wide=self.process_wide)

    def describe(self) -> dict[str, dict[str, dict[str, str]]]:
        """Every definition by kind and name (`describe_definition`)."""
        return {"workflows": {n: describe_definition(d) for n, d in self.workflows.items()},
                "activities": {n: describe_definition(d) for n, d in self.activities.items()}}

    @classmethod
    def of(cls, workflows: Iterable[Callable[..., Any] | str],
           activities: Iterable[Callable[..., Any] | str]) -> Registry:
        """The registry of a worker: the definitions behind these functions or names."""
        registry = cls()
        for ref in workflows:
            wdefn = workflow_defn_of(ref)
            if wdefn is None:
                raise ConfigurationError(
                    f"Worker was given workflow {ref!r}, which no @workflow.defn defines here; "
                    "pass the decorated function (or import its module first)"
                )
            registry.add_workflow(wdefn)
        for aref in activities:
            adefn = activity_defn_of(aref)
            if adefn is None:
                raise ConfigurationError(
                    f"Worker was given activity {aref!r}, which no @activity.defn defines "
                    "here; pass the decorated function (or import its module first)"
                )
            registry.add_activity(adefn)
        return registry


#: Every definition decorated in this process, for references by name.
DEFINITIONS = Registry(process_wide=True)


@contextmanager
def isolated_definitions() -> Iterator[Registry]:
    """Definitions made inside the block go to a registry of their own (restored
    after): a test can hold two versions of a workflow with the same name."""
    global DEFINITIONS
    saved, DEFINITIONS = DEFINITIONS, Registry(process_wide=True)
    try:
        yield DEFINITIONS
    finally:
        DEFINITIONS = saved


def define_workflow(fn: Callable[..., Any], name: str | None) -> WorkflowDefn:
    if isinstance(fn, type):
        return define_workflow_class(fn, name)
    if not inspect.iscoroutinefunction(fn):
        raise ConfigurationError(
            f"@workflow.defn needs an `async def` function or a class with a @workflow.run "
            f"method, got {fn!r}: workflows are coroutines"
        )
    params, ret = parameter_hints(fn)
    defn = WorkflowDefn(_validate.name(fn.__name__ if name is None else name, "workflow name"),
                        fn, params, ret, arity=arity(fn))
    DEFINITIONS.add_workflow(defn)
    setattr(fn, DEFN_ATTR, defn)
    return defn


def define_workflow_class(cls: type, name: str | None) -> WorkflowDefn:
    """A class-based workflow: one instance per run, handlers as its methods."""
    spec = inspect_class(cls)
    run = getattr(cls, spec.run_method)
    params, ret = parameter_hints(run)
    defn = WorkflowDefn(_validate.name(cls.__name__ if name is None else name, "workflow name"),
                        run, params[1:], ret, spec, arity(run, skip=1))  # params[0] is self
    DEFINITIONS.add_workflow(defn)
    setattr(cls, DEFN_ATTR, defn)
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
    defn = ActivityDefn(_validate.name(fn.__name__ if name is None else name, "activity name"),
                        fn, is_async, process_isolated, params, ret, arity(fn))
    DEFINITIONS.add_activity(defn)
    setattr(fn, DEFN_ATTR, defn)
    return defn


def workflow_defn_of(ref: Callable[..., Any] | str | WorkflowDefn) -> WorkflowDefn | None:
    """The definition behind a function or name, if this process knows it."""
    if isinstance(ref, WorkflowDefn):
        return ref
    if isinstance(ref, str):
        return DEFINITIONS.workflows.get(ref)
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
        return DEFINITIONS.activities.get(ref)
    defn = getattr(ref, DEFN_ATTR, None)
    if isinstance(defn, ActivityDefn):
        return defn
    raise ConfigurationError(
        f"{ref!r} is not an activity: decorate it with @durable.activity.defn or pass its name"
    )


def workflow_name(ref: Callable[..., Any] | str) -> str:
    """The name a workflow function is registered under (a name is itself)."""
    defn = workflow_defn_of(ref)
    if defn is not None:
        return defn.name
    assert isinstance(ref, str)
    return ref


def require_activity(ref: Callable[..., Any] | str) -> ActivityDefn:
    """The activity's definition; raise `NameNotRegistered` if this process has none."""
    defn = activity_defn_of(ref)
    if defn is None:
        raise NameNotRegistered(
            f"unknown activity {ref!r}: no @activity.defn with this name is imported in "
            "this process; import the module that defines it"
        )
    return defn
