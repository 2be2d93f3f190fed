"""Signal, query and update handlers: how workflows declare them, how a run finds them.

A class-based workflow declares handlers as methods (`@workflow.signal`,
`@workflow.query`, `@workflow.update` with `@x.validator`); each run gets a
fresh instance, and its bound methods become the run's handlers. A function
workflow registers them while it runs (`workflow.on_signal(name, fn)`, ...).
Either way a run has one `HandlerTable`. A signal whose name has no handler
yet is kept, in delivery order, and handed to the handler registered for it
later (at that point of the code, so replay does the same).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..converter import parameter_hints
from ..errors import ConfigurationError

HANDLER_ATTR = "__durable_handler__"
RUN_ATTR = "__durable_run__"
KINDS = ("signal", "query", "update")


@dataclass
class HandlerDecl:
    """What a decorator attached to a workflow class's method."""

    kind: str
    name: str | None
    validator: Callable[..., Any] | None = None


def declare(kind: str, fn: Callable[..., Any], name: str | None) -> Callable[..., Any]:
    """Mark `fn` (a method of a workflow class) as a handler of `kind`."""
    if not callable(fn):
        raise ConfigurationError(f"@workflow.{kind} decorates a method, got {fn!r}")
    if name is not None and (not isinstance(name, str) or not name):
        raise ConfigurationError(f"@workflow.{kind}(name=...) must be a non-empty string")
    if kind == "update":
        decl = HandlerDecl(kind, name)

        def validator(check: Callable[..., Any]) -> Callable[..., Any]:
            if inspect.iscoroutinefunction(check):
                raise ConfigurationError(
                    f"the validator of update {name or fn.__name__!r} must be a plain `def`: "
                    "it runs before anything is recorded and cannot wait for anything"
                )
            decl.validator = check
            return check

        setattr(fn, HANDLER_ATTR, decl)
        setattr(fn, "validator", validator)  # noqa: B010 (an attribute of the function)
        return fn
    setattr(fn, HANDLER_ATTR, HandlerDecl(kind, name))
    return fn


@dataclass(frozen=True)
class ClassSpec:
    """A workflow class: its run method and its handler methods by (kind, name)."""

    cls: type
    run_method: str
    handlers: dict[tuple[str, str], tuple[str, str | None]]  # -> (method, validator method)


def inspect_class(cls: type) -> ClassSpec:
    """Find the one `@workflow.run` method and the handlers of a workflow class."""
    runs = [name for name, value in _members(cls) if getattr(value, RUN_ATTR, False)]
    if len(runs) != 1:
        found = ", ".join(runs) or "none"
        raise ConfigurationError(
            f"workflow class {cls.__qualname__} needs exactly one method decorated with "
            f"@workflow.run (found: {found})"
        )
    run_fn = getattr(cls, runs[0])
    if not inspect.iscoroutinefunction(run_fn):
        raise ConfigurationError(
            f"{cls.__qualname__}.{runs[0]} is the workflow's @workflow.run method: it must be "
            "an `async def`"
        )
    try:
        inspect.signature(cls).bind()
    except TypeError as exc:
        raise ConfigurationError(
            f"workflow class {cls.__qualname__} must be constructible without arguments "
            f"(a fresh instance is made for each run; the run method takes the inputs): {exc}"
        ) from exc
    handlers: dict[tuple[str, str], tuple[str, str | None]] = {}
    for attr, value in _members(cls):
        decl = getattr(value, HANDLER_ATTR, None)
        if not isinstance(decl, HandlerDecl):
            continue
        name = decl.name or attr
        if (decl.kind, name) in handlers:
            raise ConfigurationError(
                f"workflow class {cls.__qualname__} has two {decl.kind} handlers named "
                f"{name!r}; give one another name with @workflow.{decl.kind}(name=...)"
            )
        validator = decl.validator.__name__ if decl.validator is not None else None
        handlers[(decl.kind, name)] = (attr, validator)
    return ClassSpec(cls, runs[0], handlers)


def _members(cls: type) -> list[tuple[str, Any]]:
    seen: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            seen[name] = value
    return list(seen.items())


@dataclass(frozen=True)
class Handler:
    """A handler of one run: the callable and how to call it."""

    kind: str
    name: str
    fn: Callable[..., Any]
    validator: Callable[..., Any] | None
    is_async: bool
    hints: list[Any]


def make_handler(kind: str, name: str, fn: Callable[..., Any],
                 validator: Callable[..., Any] | None = None) -> Handler:
    if kind not in KINDS:
        raise ConfigurationError(f"unknown handler kind {kind!r}; use one of {KINDS}")
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"a {kind} handler needs a non-empty string name, got {name!r}")
    if not callable(fn):
        raise ConfigurationError(f"the {kind} handler {name!r} must be callable, got {fn!r}")
    if validator is not None:
        if kind != "update":
            raise ConfigurationError("only update handlers take a validator")
        if inspect.iscoroutinefunction(validator):
            raise ConfigurationError(
                f"the validator of update {name!r} must be a plain `def`: it runs before "
                "anything is recorded and cannot wait for anything"
            )
    hints, _ = parameter_hints(fn)
    return Handler(kind, name, fn, validator, inspect.iscoroutinefunction(fn), hints)


@dataclass
class HandlerTable:
    """The handlers of one run, by kind and name, and the signals waiting for one."""

    handlers: dict[tuple[str, str], Handler] = field(default_factory=dict)
    #: signals delivered before a handler existed for their name: name -> [delivery, ...]
    buffered: dict[str, list[Any]] = field(default_factory=dict)

    def add(self, handler: Handler) -> list[Any]:
        """Register (or replace) a handler; the buffered signals it now takes, in order."""
        self.handlers[(handler.kind, handler.name)] = handler
        if handler.kind != "signal":
            return []
        return self.buffered.pop(handler.name, [])

    def get(self, kind: str, name: str) -> Handler | None:
        return self.handlers.get((kind, name))

    def names(self, kind: str) -> list[str]:
        return sorted(name for k, name in self.handlers if k == kind)

    def bind_class(self, spec: ClassSpec, instance: Any) -> None:
        for (kind, name), (method, validator) in spec.handlers.items():
            self.add(make_handler(kind, name, getattr(instance, method),
                                  getattr(instance, validator) if validator else None))
