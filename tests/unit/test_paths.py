"""Whose code a frame runs (`durable._paths`): durable's own drivers are library
code, wherever they are imported from.

A source checkout (an editable install) imports the built-in drivers from
`drivers/` beside `durable/`, outside site-packages. They were taken for the
user's code: `strict_determinism` failed a workflow whose step commit, on the
SQLite driver's loop-thread lane, yielded to the loop with ``asyncio.sleep(0)``
from the workflow's task; the loop watch could have named a driver's line as
the culprit of a blocked loop.
"""

from __future__ import annotations

import asyncio
import os

import durable_sqlite
import durable_sqlite._inline

import durable
from durable._paths import is_library


def test_durable_and_its_drivers_are_library_code() -> None:
    assert is_library(durable.__file__)
    assert is_library(durable_sqlite.__file__)
    assert is_library(durable_sqlite._inline.__file__)
    assert is_library(asyncio.__file__)


def test_the_users_code_is_not() -> None:
    assert not is_library(__file__)
    assert not is_library(os.path.abspath("examples/order.py"))
