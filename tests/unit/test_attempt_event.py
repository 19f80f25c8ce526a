"""``AttemptEvent``: a frozen dataclass whose ``__init__`` is written out (cheap to build), so
what the generated one would give is pinned here: every field, in order, with its default."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from asgi_router import AttemptEvent

EVERY_FIELD: dict[str, object] = {
    "request_id": "req-1",
    "index": 2,
    "candidate": "p/m",
    "outcome": "skipped",
    "reason": "circuit_open",
    "status": 503,
    "latency": 0.25,
    "ttfb": 0.125,
    "cost_usd": 0.001,
    "principal": "alice",
    "cause": "slow",
    "dropped_headers": 1,
}


def test_the_constructor_takes_every_field_in_order_with_the_fields_defaults() -> None:
    parameters = list(inspect.signature(AttemptEvent).parameters.values())
    fields = dataclasses.fields(AttemptEvent)
    assert [p.name for p in parameters] == [f.name for f in fields] == list(EVERY_FIELD)
    for parameter, field in zip(parameters, fields, strict=True):
        assert parameter.default == (inspect.Parameter.empty if field.default is dataclasses.MISSING else field.default)


def test_every_field_given_is_the_field_read_by_position_and_by_name() -> None:
    by_name = AttemptEvent(**EVERY_FIELD)  # type: ignore[arg-type]
    by_position = AttemptEvent(*EVERY_FIELD.values())  # type: ignore[arg-type]
    assert dataclasses.asdict(by_name) == dataclasses.asdict(by_position) == EVERY_FIELD
    assert by_name == by_position and hash(by_name) == hash(by_position)
    assert repr(by_name).startswith("AttemptEvent(request_id='req-1', index=2, candidate='p/m',")


def test_an_event_cannot_be_changed_only_replaced() -> None:
    event = AttemptEvent("req-1", 0, "p/m", "served", "served", 200)
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.status = 500  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del event.status  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.extra = 1  # type: ignore[attr-defined]
    failed = dataclasses.replace(event, outcome="failed")
    assert (failed.outcome, failed.status, event.outcome) == ("failed", 200, "served")
    assert failed != event
