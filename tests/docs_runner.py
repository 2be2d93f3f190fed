"""Runs one documentation block in a process of its own.

Each block runs in a fresh process forked from a server that has imported
durable once (multiprocessing's forkserver): the block sees a clean registry
of workflow names, a clean structlog configuration and its own working
directory, as a program would, without paying for a fresh interpreter.
The parent reads what the child printed and the traceback it left.
"""

from __future__ import annotations

import ast
import faulthandler
import importlib
import inspect
import multiprocessing
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import anyio

PRELOAD = ["anyio", "trio", "structlog", "durable", "durable.testing", "docs_runner",
           "docs_setups"]
_CONTEXT: Any = None


def _context() -> Any:
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(PRELOAD)
    return _CONTEXT


def run(steps: list[dict[str, Any]], *, workdir: Path, replace: dict[str, str],
        checks: list[str], backends: list[str], timeout: float) -> tuple[bool, str, str]:
    """Run the chain in a child; (passed, output, error text)."""
    out, err = workdir / "_output.txt", workdir / "_error.txt"
    proc = _context().Process(target=child_main, args=(steps, str(workdir), replace, checks,
                                                        backends, str(out), str(err)))
    proc.start()
    proc.join(timeout)
    if proc.is_alive():
        # where it hangs: every thread's stack, into its output (child_main)
        os.kill(proc.pid, signal.SIGUSR1)
        time.sleep(1.0)
        proc.kill()
        proc.join()
        return False, _read(out), f"the block did not finish within {timeout} s"
    error = _read(err)
    if proc.exitcode != 0 and not error:
        error = f"the block's process exited with code {proc.exitcode}"
    return proc.exitcode == 0 and not error, _read(out), error


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def child_main(steps: list[dict[str, Any]], workdir: str, replace: dict[str, str],
               checks: list[str], backends: list[str], out: str, err: str) -> None:
    os.chdir(workdir)
    sys.path.insert(0, workdir)          # "save this as hello.py" next to the program
    sys.path.append(str(Path(__file__).resolve().parents[1]))   # examples/ as in the repo
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the parent's timeout asks
    code = 0
    try:
        _run_chain(steps, replace, checks, backends)
    except BaseException:
        Path(err).write_text(traceback.format_exc(), encoding="utf-8")
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)                   # daemon threads (servers a setup started) die with us


def _run_chain(steps: list[dict[str, Any]], replace: dict[str, str], checks: list[str],
               backends: list[str]) -> None:
    import docs_setups

    ns: dict[str, Any] = {"__name__": "__main__"}
    for step in steps:
        source = step["source"]
        for old, new in replace.items():
            source = source.replace(old, new)
        if step.get("module"):
            Path(f"{step['module']}.py").write_text(source, encoding="utf-8")
            importlib.invalidate_caches()
        if step.get("file"):
            Path(step["file"]).write_text(source, encoding="utf-8")
        if step.get("write_only") or step.get("file"):
            continue
        for name in step["setups"]:
            docs_setups.SETUPS[name](ns, replace)
            for old, new in replace.items():   # a setup may add replacements
                source = source.replace(old, new)
        ns["__source__"] = source
        expected = ns.pop("__expect__", ())
        try:
            _exec(source, step["label"], ns, backends if step.get("last") else ["asyncio"])
        except expected:       # e.g. the Ctrl-C a setup sends to a block that runs forever
            pass
    for name in checks:
        check = docs_setups.CHECKS[name]
        if inspect.iscoroutinefunction(check):
            for backend in backends:
                anyio.run(check, ns, backend=backend)
        else:
            check(ns)


def _exec(source: str, label: str, ns: dict[str, Any], backends: list[str]) -> None:
    """Run a block as a module body; a block with top-level ``await`` (a
    fragment of an async function) runs on each of `backends`."""
    path, _, line = label.rpartition(":")
    # line numbers in tracebacks are the markdown file's
    tree = ast.parse("\n" * int(line) + source, path)
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        # a block that ends in an expression (a dict the page shows): keep its
        # value as ``_``, as the REPL does, for checks to compare
        last = tree.body[-1]
        tree.body[-1] = ast.copy_location(ast.Assign(
            targets=[ast.Name("_", ast.Store())], value=last.value), last)
        ast.fix_missing_locations(tree)
    code = compile(tree, path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if not code.co_flags & inspect.CO_COROUTINE:
        exec(code, ns)
        return

    async def body() -> None:
        await eval(code, ns)

    for backend in backends:
        anyio.run(body, backend=backend)
