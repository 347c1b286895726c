"""Hostile values through the public API, on both backends (property tests).

Tool arguments and outputs are written by language models and by far sides nobody
controls. Every value either round-trips exactly, with one effect, or is refused before
anything acts; ``verify`` is clean after; every accepted key still replays, unchanged,
after the ledger is reopened.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from temporal_ledger.ledger import ActionRequest, InvalidRequest, Ledger
from temporal_ledger.ledger._models import EffectState
from temporal_ledger.ledger._testing_child import AUTHORITY, request

SQL_LIKE = [
    "'); DROP TABLE ledger_events; --",
    "$$; DELETE FROM ledger_keys; $$",
    "$fn$ $1 %s %(key)s ? :name",
    "\\'; \\\\ \\x00 E'\\x41' e'\\n' U&'\\0041'",
    "E'it''s'",
    "\x00",
    "a\x00b",
    "lone \ud800 surrogate",
    "\udfff\ud800",
    "\u2028\u2029\ufeff\U0001f600",
    "",
]

# Every character, lone surrogates and NUL included.
hostile_text = st.text(
    alphabet=st.characters(exclude_categories=(), include_characters="\x00\ud800\udfff"),
    max_size=40,
) | st.sampled_from(SQL_LIKE)
long_text = st.integers(min_value=10_000, max_value=200_000).map(lambda n: "\x00'$\\" * (n // 4))
numbers = (
    st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([2**53 - 1, -(2**53 - 1), 2**53, -(2**53), 2**63, 0])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([-0.0, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 2.0**53 + 2])
)
scalars = st.none() | st.booleans() | numbers | hostile_text | long_text


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for i in range(depth):
        value = [value] if i % 2 else {"d": value}
    return value


# Deep values travel as (marker, depth) and are built in the test: hypothesis prints the
# values it draws, and a printer recurses.
DEEP = "<nested>"
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(hostile_text, children, max_size=4)
    ),
    max_leaves=12,
) | st.tuples(st.just(DEEP), st.integers(min_value=90, max_value=130) | st.just(5000))


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same JSON types all the way down (1 is not 1.0, -0.0 not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


class World:
    """The far side: what each key caused."""

    def __init__(self) -> None:
        self.effects: dict[str, int] = {}

    def echo(self, value: Any) -> Any:
        def adapter(req: ActionRequest, ctx: Any) -> Any:
            self.effects[req.key] = self.effects.get(req.key, 0) + 1
            return value

        return adapter


PROPERTY = settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def test_hostile_values_round_trip_or_are_refused_before_acting(ledger_url: str) -> None:
    counter = itertools.count()
    world = World()
    accepted: dict[str, tuple[ActionRequest, Any]] = {}  # key -> (request, its answer)

    with asyncio.Runner() as runner:
        ledger = runner.run(_open(ledger_url))

        @PROPERTY
        @given(value=json_values, where=st.sampled_from(["payload", "output"]))
        # The values of the issue, every run: a NUL output, 5,000-deep nesting, big integers,
        # lone surrogates, SQL-like text.
        @example(value={"ok": "a\u0000b"}, where="output")
        @example(value={"ok": "a\u0000b"}, where="payload")
        @example(value=(DEEP, 5000), where="payload")
        @example(value=(DEEP, 5000), where="output")
        @example(value=2**60, where="payload")
        @example(value={"s": "\ud800"}, where="output")
        @example(value=SQL_LIKE, where="payload")
        @example(value=-0.0, where="output")
        def one(value: Any, where: str) -> None:
            key = f"hostile-{next(counter)}"
            if isinstance(value, tuple):
                value = nested(value[1])
            if where == "payload":
                runner.run(_as_payload(ledger, world, key, value, accepted))
            else:
                runner.run(_as_output(ledger, world, key, value, accepted))

        one()
        report = ledger.verify()
        assert report.ok, report.problems
        runner.run(ledger.aclose())

        async def replay_all() -> None:
            async with Ledger.open(ledger_url) as reopened:
                for key, (req, first) in accepted.items():
                    again = await reopened.execute(
                        req.model_copy(update={"action_id": f"again-{key}"}),
                        authority=AUTHORITY,
                        adapter=world.echo("never"),
                    )
                    assert again.replayed and same(again.output, first.output), key
                    assert (again.status, again.error) == (first.status, first.error), key
                assert reopened.verify().ok

        runner.run(replay_all())
    assert set(world.effects.values()) <= {1}


async def _open(url: str) -> Ledger:
    ledger = Ledger.open(url)
    return await ledger.__aenter__()


async def _as_payload(
    ledger: Ledger, world: World, key: str, value: Any, accepted: dict[str, Any]
) -> None:
    """The value as a tool's argument: refused before anything acts, or recorded exactly."""
    try:
        req = request(key, payload={"value": value})
    except InvalidRequest:
        return  # refused while the request was built: nothing can have acted
    try:
        first = await ledger.execute(req, authority=AUTHORITY, adapter=world.echo({"ok": 1}))
    except InvalidRequest:
        assert key not in world.effects and ledger.events(key) == []
        return
    assert first.ok and world.effects[key] == 1
    assert same(ledger.events(key)[0].payload["payload"], {"value": value})
    again = await ledger.execute(
        req.model_copy(update={"action_id": f"replay-{key}"}),
        authority=AUTHORITY,
        adapter=world.echo("never"),
    )
    assert again.replayed and world.effects[key] == 1
    accepted[key] = (req, first)


async def _as_output(
    ledger: Ledger, world: World, key: str, value: Any, accepted: dict[str, Any]
) -> None:
    """The value as what a far side answered, after acting: recorded exactly, or, when it
    cannot be recorded, as an observed effect whose output is unusable; never acted again."""
    req = request(key)
    first = await ledger.execute(req, authority=AUTHORITY, adapter=world.echo(value))
    assert world.effects[key] == 1 and first.effect is EffectState.OBSERVED
    if first.status == "succeeded":
        assert same(first.output, value)
        assert same(ledger.state(key).output, value)
    else:
        assert first.error_type == "UnrecordableOutput" and "sha256 " in (first.error or "")
    again = await ledger.execute(request(key), authority=AUTHORITY, adapter=world.echo("never"))
    assert again.replayed and same(again.output, first.output) and world.effects[key] == 1
    accepted[key] = (req, first)


@pytest.mark.parametrize("text", SQL_LIKE[:5])
async def test_sql_like_text_round_trips_in_every_field(ledger_url: str, text: str) -> None:
    world = World()
    async with Ledger.open(ledger_url) as ledger:
        key = f"k {text[:20]}".replace("\x00", "")
        req = request(
            key, instruction=text, performer=text + "p", payload={text: text}, context={text: 1}
        )
        first = await ledger.execute(req, authority=AUTHORITY, adapter=world.echo({text: [text]}))
        assert first.ok and same(first.output, {text: [text]})
        requested = ledger.events(key)[0].payload
        assert (requested["instruction"], requested["performer"]) == (text, text + "p")
        assert same(requested["payload"], {text: text}) and same(requested["context"], {text: 1})
    async with Ledger.open(ledger_url) as reopened:
        again = await reopened.execute(req, authority=AUTHORITY, adapter=world.echo("never"))
        assert again == first  # the same submission: its recorded answer
        replay = await reopened.execute(
            request(key, instruction=text, performer=text + "p", payload={text: text}),
            authority=AUTHORITY,
            adapter=world.echo("never"),
        )
        assert replay.replayed and same(replay.output, {text: [text]})
        assert reopened.verify().ok
    assert world.effects == {key: 1}
