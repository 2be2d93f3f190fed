"""The payload converter: JSON round trips rebuilt from type hints, errors at encode.

Every test runs with both JSON codecs (the standard library and orjson, the
``fast`` extra): they must behave identically.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import importlib.util
import sys
import textwrap
import typing
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

import pytest

from durable import JSONConverter, PayloadRejected, StructuralLimitExceeded
from durable.converter import check_size, decode_args, parameter_hints, rebuild, resolve_hints

conv = JSONConverter()


@pytest.fixture(autouse=True, params=["json", "orjson"])
def codec(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run each test with `conv` on one codec (orjson is in the dev extra)."""
    name: str = request.param
    monkeypatch.setattr(sys.modules[__name__], "conv", JSONConverter(codec=name))
    return name


@dataclasses.dataclass
class Item:
    sku: str
    quantity: int


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Size(enum.IntEnum):
    SMALL = 1
    LARGE = 2


@dataclasses.dataclass
class Order:
    order_id: str
    items: list[Item]
    by_sku: dict[str, Item]
    gift: Item | None = None
    colour: Colour = Colour.RED
    placed_at: datetime.datetime | None = None
    note: str = ""


def round_trip(value: Any, hint: Any) -> Any:
    return conv.decode(conv.encode(value, "the value"), hint)


def test_a_dataclass_round_trips() -> None:
    assert round_trip(Item("a", 2), Item) == Item("a", 2)


def test_nested_dataclasses_round_trip_through_lists_dicts_and_optionals() -> None:
    order = Order("o-1", [Item("a", 1), Item("b", 2)], {"c": Item("c", 3)}, gift=Item("g", 1),
                  colour=Colour.BLUE,
                  placed_at=datetime.datetime(2026, 4, 12, 12, 0, tzinfo=datetime.UTC))
    back = round_trip(order, Order)
    assert back == order
    assert isinstance(back.items[0], Item) and isinstance(back.by_sku["c"], Item)
    assert back.colour is Colour.BLUE


def test_a_dataclass_ignores_unknown_keys_and_uses_defaults_for_missing_ones() -> None:
    text = '{"order_id":"o","items":[],"by_sku":{},"added_later":1}'
    assert conv.decode(text, Order) == Order("o", [], {})


@pytest.mark.parametrize("hint", [Optional[Item], Item | None,  # noqa: UP045
                                  typing.Union[Item, None]])  # noqa: UP007
def test_optional_hints_rebuild_the_value_or_keep_none(hint: Any) -> None:
    assert round_trip(Item("x", 1), hint) == Item("x", 1)
    assert round_trip(None, hint) is None


def test_containers_of_dataclasses_rebuild_each_element() -> None:
    assert round_trip([Item("a", 1), Item("b", 2)], list[Item]) == [Item("a", 1), Item("b", 2)]
    assert round_trip({"k": Item("a", 1)}, dict[str, Item]) == {"k": Item("a", 1)}
    assert round_trip([[Item("a", 1)]], list[list[Item]]) == [[Item("a", 1)]]


def test_a_union_of_two_types_is_left_as_decoded() -> None:
    assert round_trip(Item("a", 1), Item | int) == {"sku": "a", "quantity": 1}


def test_no_hint_or_any_leaves_plain_json() -> None:
    assert round_trip(Item("a", 1), None) == {"sku": "a", "quantity": 1}
    assert round_trip(Item("a", 1), Any) == {"sku": "a", "quantity": 1}
    assert conv.decode(None, Item) is None


def test_enums_round_trip() -> None:
    assert round_trip(Colour.BLUE, Colour) is Colour.BLUE
    assert round_trip(Size.LARGE, Size) is Size.LARGE
    assert round_trip([Colour.RED], list[Colour]) == [Colour.RED]


def test_datetimes_round_trip_aware_or_naive() -> None:
    aware = datetime.datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=datetime.UTC)
    assert round_trip(aware, datetime.datetime) == aware
    naive = datetime.datetime(2026, 1, 2, 3, 4, 5)
    assert round_trip(naive, datetime.datetime) == naive
    assert round_trip([aware], list[datetime.datetime]) == [aware]


def test_dates_uuids_sets_and_tuples_come_back_as_their_hints_say() -> None:
    assert round_trip(datetime.date(2026, 2, 28), datetime.date) == datetime.date(2026, 2, 28)
    ident = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert round_trip(ident, uuid.UUID) == ident
    assert round_trip({3, 1, 2}, set[int]) == {1, 2, 3}
    assert round_trip(frozenset({"b", "a"}), frozenset[str]) == frozenset({"a", "b"})
    assert round_trip((Item("a", 1), 2), tuple[Item, int]) == (Item("a", 1), 2)
    assert round_trip((1, 2, 3), tuple[int, ...]) == (1, 2, 3)
    assert round_trip(ident, uuid.UUID | None) == ident


def test_without_a_hint_values_stay_plain_json() -> None:
    """As docs/concepts.md documents: stored, but nothing to rebuild them by."""
    assert round_trip(datetime.date(2026, 2, 28), None) == "2026-02-28"
    assert round_trip({3, 1, 2}, None) == [1, 2, 3]  # stored sorted
    assert round_trip((1, 2), None) == [1, 2]


def test_pydantic_models_round_trip() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Customer(pydantic.BaseModel):  # type: ignore[name-defined, misc]
        name: str
        since: datetime.date

    value = Customer(name="Ada", since=datetime.date(2020, 5, 1))
    assert conv.encode(value, "a customer") == '{"name":"Ada","since":"2020-05-01"}'
    assert round_trip(value, Customer) == value
    assert round_trip([value], list[Customer]) == [value]


@pytest.mark.parametrize("value", [object(), {"nan": float("nan")}, {1j}, b"bytes"])
def test_an_unserialisable_value_fails_at_encode_naming_what(value: Any) -> None:
    with pytest.raises(PayloadRejected, match="the arguments of activity 'charge'") as err:
        conv.encode(value, "the arguments of activity 'charge'")
    assert "configure another payload converter" in str(err.value)


def test_check_size_counts_utf8_bytes() -> None:
    check_size("x" * 1000, 1000, "the result")  # exactly at the limit
    with pytest.raises(StructuralLimitExceeded) as err:
        check_size("é" * 600, 1000, "the result of activity 'big'")  # 600 chars, 1200 bytes
    assert (err.value.kind, err.value.value, err.value.limit) == ("payload_bytes", 1200, 1000)
    assert "the result of activity 'big' is too large" in str(err.value)
    with pytest.raises(StructuralLimitExceeded):
        check_size("x" * 1001, 1000, "the input")


def test_decode_args_rebuilds_each_argument_from_its_parameter_hint() -> None:
    payload = conv.encode([Item("a", 1), {"sku": "b", "quantity": 2}, 3, "extra"], "args")
    args = decode_args(conv, payload, [Item, Item, int])
    assert args == [Item("a", 1), Item("b", 2), 3, "extra"]
    assert decode_args(conv, '{"sku":"a","quantity":1}', [Item]) == [{"sku": "a", "quantity": 1}]


def test_rebuild_leaves_values_of_the_wrong_shape_alone() -> None:
    assert rebuild("not a dict", Item) == "not a dict"
    assert rebuild({"a": 1}, list[Item]) == {"a": 1}


# ---------------------------------------------------------------- type hints

def _handler(item: Item, items: list[Item], count: int, *rest: Any, flag: bool = False
             ) -> Order:
    raise AssertionError("never called")


def test_parameter_hints_are_positional_parameters_and_the_return() -> None:
    params, ret = parameter_hints(_handler)
    assert params == [Item, list[Item], int]
    assert ret is Order


TYPE_CHECKING_MODULE = textwrap.dedent('''
    from __future__ import annotations

    import dataclasses
    from typing import TYPE_CHECKING

    if TYPE_CHECKING:
        from collections.abc import Sequence
        from decimal import Decimal


    @dataclasses.dataclass
    class Point:
        x: int
        y: int


    @dataclasses.dataclass
    class Shape:
        corners: list[Point]
        tags: Sequence[str]


    def move(point: Point, tags: Sequence[str], by: Decimal, shape: Shape) -> Point:
        return point
''')


@pytest.fixture
def typed_module(tmp_path: Path) -> typing.Iterator[ModuleType]:
    """A module whose annotations name types imported only under TYPE_CHECKING."""
    path = tmp_path / "typed_only_when_checking.py"
    path.write_text(TYPE_CHECKING_MODULE)
    name = f"typed_only_when_checking_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[name]


def test_type_checking_imports_do_not_drop_the_other_hints(typed_module: ModuleType) -> None:
    with pytest.raises(NameError):  # why resolve_hints cannot just call get_type_hints
        typing.get_type_hints(typed_module.move)
    params, ret = parameter_hints(typed_module.move)
    point, shape = typed_module.Point, typed_module.Shape
    assert params == [point, None, None, shape]
    assert ret is point
    assert resolve_hints(shape) == {"corners": list[point]}


def test_a_dataclass_argument_arrives_as_a_dataclass_despite_type_checking_imports(
    typed_module: ModuleType,
) -> None:
    params, _ = parameter_hints(typed_module.move)
    payload = conv.encode([{"x": 1, "y": 2}, ["a"], 3, {"corners": [{"x": 0, "y": 0}],
                                                        "tags": ["t"]}], "args")
    point, tags, by, shape = decode_args(conv, payload, params)
    assert point == typed_module.Point(1, 2)
    assert (tags, by) == (["a"], 3)
    assert shape == typed_module.Shape([typed_module.Point(0, 0)], ["t"])
