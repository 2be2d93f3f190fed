"""``UPDATE ... RETURNING``, on databases that have it and on those that do not.

SQLite (3.35+) and PostgreSQL return the updated rows from the UPDATE
itself: one round trip. A database with ``INSERT``/``DELETE ... RETURNING``
but not ``UPDATE ... RETURNING`` (`Dialect.returning` false) gets the same
effect from a locking read of the rows' keys in key order (the store's lock order), the
UPDATE by those keys, and a read of the columns back: the rows stay locked
from the first statement to the commit, so what is read back is exactly what
this transaction wrote. A single row named by its key needs no locking read:
the UPDATE locks it and says whether it matched (its row count).

The store writes its statements through these two functions and never
names a database (`Dialect.returning` decides).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..driver import Dialect, Program, Row, ex, placeholders, q, q1


def update_returning(
    dialect: Dialect, table: str, assignments: str, set_params: Sequence[Any], where: str,
    where_params: Sequence[Any], returning: str, *, key: str, ordered: bool = False,
    locked: Sequence[Any] | None = None,
) -> Program[list[Row]]:
    """``UPDATE table SET assignments WHERE where RETURNING returning``: the rows.

    `key` is the table's one-column key. `ordered`: lock the rows in key
    order first (where two transactions may update overlapping sets, e.g. a
    worker's leases and a claim). `locked`: the keys of rows this
    transaction has already locked and that `where` selects (a claim's
    picked runs), so no locking read is needed without RETURNING; the rows
    come back in their order (else in key order).
    """
    if dialect.returning:
        if ordered and dialect.lock:
            where = (f"{key} IN (SELECT {key} FROM {table} WHERE {where} ORDER BY {key}"
                     f"{dialect.lock})")
        rows: list[Row] = yield q(
            f"UPDATE {table} SET {assignments} WHERE {where} RETURNING {returning}",
            *set_params, *where_params)
        return rows
    if locked is None:
        found = yield q(f"SELECT {key} FROM {table} WHERE {where} ORDER BY {key}{dialect.lock}",
                        *where_params)
        locked = [r[key] for r in found]
    if not locked:
        return []
    keys = f"{key} IN ({placeholders(len(locked))})"
    yield ex(f"UPDATE {table} SET {assignments} WHERE {keys}", *set_params, *locked)
    # in the order the rows were picked (a claim's: oldest ready first)
    order = " ".join(f"WHEN ? THEN {i}" for i in range(len(locked)))
    back: list[Row] = yield q(
        f"SELECT {returning} FROM {table} WHERE {keys} ORDER BY CASE {key} {order} END",
        *locked, *locked)
    return back


def update_one_returning(
    dialect: Dialect, table: str, assignments: str, set_params: Sequence[Any], where: str,
    where_params: Sequence[Any], returning: str, *, key: str, value: Any,
) -> Program[Row | None]:
    """The one row named by ``key = value`` (and `where`, which must include
    that condition), updated; its `returning` columns, or None if it did not
    match. Without RETURNING: the UPDATE (which locks the row), then a read
    by key when it matched."""
    if dialect.returning:
        row: Row | None = yield q1(
            f"UPDATE {table} SET {assignments} WHERE {where} RETURNING {returning}",
            *set_params, *where_params)
        return row
    count = yield ex(f"UPDATE {table} SET {assignments} WHERE {where}",
                     *set_params, *where_params)
    if not count:
        return None
    back: Row | None = yield q1(f"SELECT {returning} FROM {table} WHERE {key} = ?", value)
    return back
