"""Regression: annotations imported only under TYPE_CHECKING keep the other hints.

`typing.get_type_hints` fails as a whole when one annotation cannot be
evaluated at run time, which used to drop every hint of the function: a
dataclass argument then reached the activity (or workflow) as a dict. This
module annotates parameters with a type imported only for the type checker,
next to dataclass parameters, and checks real instances arrive.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pytest

import durable
from durable import activity, workflow

if TYPE_CHECKING:
    from collections.abc import Sequence

pytestmark = pytest.mark.anyio


@dataclasses.dataclass
class Parcel:
    parcel_id: str
    weight: int
    labels: list[str] = dataclasses.field(default_factory=list)


def _require_parcel(value: object) -> Parcel:
    if not isinstance(value, Parcel):
        raise TypeError(f"expected a Parcel, got {type(value).__name__}: {value!r}")
    return value


@activity.defn
def hinted_label_parcel(parcel: Parcel, labels: Sequence[str]) -> Parcel:
    parcel = _require_parcel(parcel)
    return Parcel(parcel.parcel_id, parcel.weight, [*parcel.labels, *labels])


@workflow.defn
async def hinted_ship_parcel(parcel: Parcel, labels: Sequence[str]) -> dict[str, Any]:
    parcel = _require_parcel(parcel)
    remote = await workflow.execute_activity(hinted_label_parcel, parcel, labels)
    local = await workflow.execute_local_activity(hinted_label_parcel, parcel, ["local"])
    return {"remote": _require_parcel(remote).labels, "local": _require_parcel(local).labels}


async def test_dataclass_arguments_arrive_as_instances_despite_type_checking_imports(
    client: durable.Client, make_worker: Any
) -> None:
    async with make_worker(workflows=[hinted_ship_parcel], activities=[hinted_label_parcel]):
        result = await client.execute(hinted_ship_parcel, Parcel("p-1", 3, ["fragile"]),
                                      ["express"], id="hinted")
    assert result == {"remote": ["fragile", "express"], "local": ["fragile", "local"]}
