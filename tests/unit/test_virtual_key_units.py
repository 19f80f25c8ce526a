"""The tricky logic of virtual keys, table by table: which refs a key's groups allow, when a key
opens, the ring's look-ups of unknown secrets (rate-limited, misses remembered a second), the
admin door's lock-out, and what an operator may ask of a key."""

from __future__ import annotations

import hashlib

import pytest
from pydantic import SecretStr

from asgi_router.endpoints.admin_door import AdminDoor
from asgi_router.endpoints.admin_spend import as_csv, spend_request
from asgi_router.keys.key_input import InputProblem, KeyRequest, parse_input
from asgi_router.keys.key_ring import KeyRing
from asgi_router.keys.key_secrets import is_virtual, key_digest, new_secret, shown_prefix
from asgi_router.keys.key_table import DuplicateName, MemoryKeyTable
from asgi_router.keys.virtual_key import VirtualKey, allowed

from ..doubles import FakeClock

pytestmark = pytest.mark.anyio

ALIASES = {"fast": "group/coder", "cheap": "mock/small"}


@pytest.mark.parametrize(
    ("groups", "model", "allows"),
    [
        (None, "anything/at-all", True),
        (("group/coder",), "group/coder", True),
        (("group/coder",), "fast", True),  # an alias of an allowed ref
        (("fast",), "group/coder", True),  # the ref an allowed alias names
        (("fast",), "fast", True),
        (("fast",), "cheap", False),
        (("group/coder",), "mock/small", False),
        ((), "group/coder", False),
    ],
)
def test_a_keys_groups_allow_the_ref_asked_after_alias_resolution(
    groups: tuple[str, ...] | None, model: str, allows: bool
) -> None:
    assert allowed(groups, model, ALIASES) is allows


def _key(**fields: object) -> VirtualKey:
    secret = "sk-ar-" + "a" * 43
    base: dict[str, object] = {
        "id": "vk_1",
        "caller": "team-a",
        "digest": key_digest(secret.encode()),
        "prefix": shown_prefix(secret),
        "created_at": 0.0,
    }
    return VirtualKey(**{**base, **fields})  # type: ignore[arg-type]


def test_a_key_opens_only_unrevoked_enabled_unexpired_and_an_old_secret_only_in_its_grace() -> None:
    key = _key()
    digest, old = key.digest, key_digest(b"sk-ar-old")
    assert key.opens(digest, 100.0)
    assert not _key(revoked=True).opens(digest, 100.0)
    assert not _key(disabled=True).opens(digest, 100.0)
    assert _key(expires_at=101.0).opens(digest, 100.0) and not _key(expires_at=100.0).opens(digest, 100.0)
    rotated = _key(previous_digest=old, previous_until=150.0)
    assert rotated.opens(old, 149.9) and not rotated.opens(old, 150.0)
    assert not key.opens(old, 100.0)


def test_a_secret_has_256_random_bits_and_listings_show_its_first_6_and_last_4() -> None:
    secret = new_secret()
    assert secret.startswith("sk-ar-") and len(secret) == 6 + 43 and is_virtual(secret.encode())
    assert new_secret() != secret
    assert shown_prefix(secret) == f"sk-ar-{secret[6:12]}...{secret[-4:]}"
    assert key_digest(secret.encode()) == hashlib.sha256(secret.encode()).digest()


async def test_the_ring_looks_an_unknown_secret_up_once_remembers_the_miss_a_second_and_limits_the_rate() -> None:
    clock = FakeClock()
    table = MemoryKeyTable()
    ring = KeyRing(table, lookups=3.0, clock=clock, wall=clock.wall)
    unknown = key_digest(b"sk-ar-unknown")
    assert ring.may_look_up(unknown)
    assert await ring.look_up(unknown) is None
    assert not ring.may_look_up(unknown)  # the miss is remembered
    clock.advance(1.0)
    assert ring.may_look_up(unknown)  # a second later it may be asked again
    others = [ring.may_look_up(key_digest(f"sk-ar-{n}".encode())) for n in range(5)]
    assert others.count(True) == 2  # three a second: one was spent above
    clock.advance(1.0)
    key = _key()
    await table.add(key)
    assert ring.may_look_up(key.digest)
    assert await ring.look_up(key.digest) == key and ring.find(key.digest) == key


async def test_the_ring_learns_changes_from_its_refresh_and_forgets_a_rotated_digest() -> None:
    clock = FakeClock()
    table = MemoryKeyTable()
    ring = KeyRing(table, clock=clock, wall=clock.wall)
    key = _key(updated_at=clock.wall())
    await table.add(key)
    await ring.load()
    assert ring.find(key.digest) == key
    new = key_digest(b"sk-ar-new")
    clock.advance(0.5)
    await table.put(_key(digest=new, revoked=True, updated_at=clock.wall()))
    await ring.refresh()
    assert ring.find(key.digest) is None
    found = ring.find(new)
    assert found is not None and found.revoked


async def test_a_memory_table_refuses_a_name_its_caller_already_has() -> None:
    table = MemoryKeyTable()
    await table.add(_key(name="ci"))
    with pytest.raises(DuplicateName):
        await table.add(_key(id="vk_2", digest=b"2", name="ci"))
    await table.add(_key(id="vk_3", digest=b"3", name="ci", caller="team-b"))


def _scope(key: str | None, client: str = "10.0.0.1") -> dict[str, object]:
    headers = [] if key is None else [(b"authorization", f"Bearer {key}".encode())]
    return {"type": "http", "headers": headers, "client": (client, 5000)}


def test_the_admin_door_locks_an_address_out_for_60_s_after_10_failures_within_60_s() -> None:
    clock = FakeClock()
    door = AdminDoor([SecretStr("admin-key-0123456789abcdef")], clock)
    right = _scope("admin-key-0123456789abcdef")
    for _ in range(9):
        refused = door.refusal(_scope("wrong-key-0123456789"))
        assert refused is not None and refused.status == 401
    clock.advance(61)  # the first nine left the window
    assert door.refusal(right) is None
    for _ in range(10):
        door.refusal(_scope("wrong-key-0123456789"))
    locked = door.refusal(right)
    assert locked is not None and locked.status == 429 and locked.code == "too_many_failed_logins"
    assert door.refusal(_scope("admin-key-0123456789abcdef", "10.0.0.2")) is None  # another address
    clock.advance(60)
    assert door.refusal(right) is None


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        (b"[]", 400, None),
        (b"not json", 400, None),
        (b'{"caller": "a", "secret": "x"}', 400, "secret"),
        (b'{"caller": "a", "hard_limit": 2}', 422, None),  # needs downgrade_to
        (b'{"caller": "a", "downgrade_to": "bad ref!"}', 422, "downgrade_to"),
        (b'{"caller": "a", "usd_per_day": -1}', 422, "usd_per_day"),
    ],
)
def test_what_an_operator_may_ask_of_a_key_is_checked_naming_the_field(
    body: bytes, status: int, field: str | None
) -> None:
    problem = parse_input(KeyRequest, body)
    assert isinstance(problem, InputProblem)
    assert (problem.status, problem.field) == (status, field)


def test_spend_queries_take_a_day_a_time_or_a_span_and_csv_cells_never_run_as_formulas() -> None:
    assert spend_request(b"by=day&since=7d", 1_000_000.0) == ("day", 1_000_000.0 - 7 * 86_400, None)
    assert spend_request(b"since=2026-01-31", 0.0) == ("key", 1_769_817_600.0, None)
    refused = spend_request(b"by=week", 0.0)
    assert isinstance(refused, InputProblem) and refused.field == "by"
    refused = spend_request(b"by=key&from=1d", 0.0)
    assert isinstance(refused, InputProblem) and refused.status == 400
    text = as_csv("caller", [{"caller": "=cmd()", "requests": 2, "cost_usd": -0.5}]).decode()
    assert text.splitlines() == [
        "caller,requests,input_tokens,output_tokens,cached_tokens,cost_usd",
        "'=cmd(),2,,,,-0.5",
    ]
