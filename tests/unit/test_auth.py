"""Inbound auth guards, one by one: which option, which status, which principal."""

from __future__ import annotations

import hashlib
import inspect
from typing import Any

import pytest
from starlette.datastructures import Headers

from asgi_router import ConfigError, RouterSettings
from asgi_router.auth import Admitted, build_guard, presented_key
from asgi_router.errors import RouterError

pytestmark = pytest.mark.anyio

KEY_A = "inbound-key-AAAA-0123456789"
KEY_B = "inbound-key-BBBB-9876543210"
_PROVIDERS = {"openai": {"base_url": "https://api.openai.com/v1"}}


def _scope(*headers: tuple[bytes, bytes]) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": list(headers)}


def _settings(**kwargs: Any) -> RouterSettings:
    return RouterSettings(providers=_PROVIDERS, **kwargs)


# --- choosing exactly one option --------------------------------------------------------------


def test_no_auth_option_is_a_config_error_naming_all_three() -> None:
    with pytest.raises(ConfigError) as caught:
        build_guard(_settings(), None)
    message = str(caught.value)
    assert "authorize=" in message
    assert "api_keys" in message
    assert "allow_unauthenticated=True" in message


@pytest.mark.parametrize(
    ("kwargs", "authorize", "named"),
    [
        ({"api_keys": [KEY_A]}, lambda scope, headers: True, ("authorize=", "api_keys")),
        ({"allow_unauthenticated": True}, lambda scope, headers: True, ("authorize=", "allow_unauthenticated")),
    ],
)
def test_two_auth_options_at_once_are_a_config_error_naming_both(
    kwargs: dict[str, Any], authorize: Any, named: tuple[str, str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        build_guard(_settings(**kwargs), authorize)
    assert all(name in str(caught.value) for name in named)


def test_authorize_that_is_not_callable_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="callable"):
        build_guard(_settings(), "yes please")  # type: ignore[arg-type]


async def test_allow_unauthenticated_admits_a_request_without_credentials_as_nobody() -> None:
    guard = build_guard(_settings(allow_unauthenticated=True), None)
    assert await guard.check(_scope()) == Admitted(None)


def test_key_and_open_guards_decide_without_anything_to_await() -> None:
    # The router awaits a verdict only when it is awaitable: these two never need a coroutine.
    assert build_guard(_settings(allow_unauthenticated=True), None).verdict(_scope()) == Admitted(None)
    verdict = build_guard(_settings(api_keys=[KEY_A]), None).verdict(_scope((b"x-api-key", KEY_A.encode())))
    assert isinstance(verdict, Admitted)


async def test_an_async_authorize_verdict_is_awaited_and_a_sync_one_is_not() -> None:
    async def later(scope: Any, headers: Any) -> str:
        return "tenant-a"

    pending = build_guard(_settings(), later).verdict(_scope())
    assert inspect.isawaitable(pending)
    assert await pending == Admitted("tenant-a")
    assert build_guard(_settings(), lambda scope, headers: "tenant-b").verdict(_scope()) == Admitted("tenant-b")


# --- api_keys -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        [(b"authorization", f"Bearer {KEY_A}".encode())],
        [(b"authorization", f"bearer   {KEY_A}  ".encode())],
        [(b"x-api-key", KEY_A.encode())],
        [(b"authorization", b"Basic Zm9vOmJhcg=="), (b"x-api-key", KEY_A.encode())],
    ],
    ids=["bearer", "bearer-lowercase-padded", "x-api-key", "basic-then-x-api-key"],
)
async def test_api_key_presented_as_bearer_or_x_api_key_is_admitted(headers: list[tuple[bytes, bytes]]) -> None:
    guard = build_guard(_settings(api_keys=[KEY_A, KEY_B]), None)
    admitted = await guard.check(_scope(*headers))
    assert isinstance(admitted, Admitted)


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [(b"authorization", b"Bearer ")],
        [(b"authorization", b"Basic Zm9vOmJhcg==")],
        [(b"x-api-key", b"  ")],
        [(b"cookie", f"key={KEY_A}".encode())],
    ],
    ids=["none", "empty-bearer", "basic-only", "blank-x-api-key", "cookie"],
)
async def test_no_usable_api_key_is_401_with_www_authenticate(headers: list[tuple[bytes, bytes]]) -> None:
    guard = build_guard(_settings(api_keys=[KEY_A]), None)
    refused = await guard.check(_scope(*headers))
    assert isinstance(refused, RouterError)
    assert (refused.status, refused.code) == (401, "unauthenticated")
    assert (b"www-authenticate", b"Bearer") in refused.headers
    assert "Authorization: Bearer" in refused.message


@pytest.mark.parametrize(
    "token",
    [KEY_A[:-1], KEY_A + "x", KEY_A.upper(), "x" * 5000, KEY_A[:5]],
    ids=["one-short", "one-long", "wrong-case", "huge", "prefix"],
)
async def test_wrong_api_key_is_403_and_the_message_does_not_echo_it(token: str) -> None:
    guard = build_guard(_settings(api_keys=[KEY_A]), None)
    refused = await guard.check(_scope((b"authorization", f"Bearer {token}".encode())))
    assert isinstance(refused, RouterError)
    assert (refused.status, refused.code) == (403, "permission_denied")
    assert token not in refused.message and KEY_A[:5] not in refused.message


async def test_bearer_token_wins_over_x_api_key_when_both_are_sent() -> None:
    guard = build_guard(_settings(api_keys=[KEY_A]), None)
    refused = await guard.check(
        _scope((b"authorization", b"Bearer wrong-key-0000000000"), (b"x-api-key", KEY_A.encode()))
    )
    assert isinstance(refused, RouterError) and refused.status == 403


async def test_listed_key_principal_is_a_sha256_fingerprint_not_the_key() -> None:
    guard = build_guard(_settings(api_keys=[KEY_A, KEY_B]), None)
    admitted = await guard.check(_scope((b"x-api-key", KEY_B.encode())))
    assert admitted == Admitted(f"key-{hashlib.sha256(KEY_B.encode()).hexdigest()[:8]}")
    assert isinstance(admitted, Admitted) and KEY_B[:5] not in str(admitted.principal)


async def test_named_key_principal_is_its_name() -> None:
    guard = build_guard(_settings(api_keys={"alice": KEY_A, "bob": KEY_B}), None)
    assert await guard.check(_scope((b"authorization", f"Bearer {KEY_A}".encode()))) == Admitted("alice")
    assert await guard.check(_scope((b"authorization", f"Bearer {KEY_B}".encode()))) == Admitted("bob")


def test_presented_key_prefers_bearer_and_ignores_other_schemes() -> None:
    assert presented_key([(b"x-api-key", b"k1"), (b"authorization", b"Bearer k2")]) == b"k2"
    assert presented_key([(b"authorization", b"Token k2"), (b"x-api-key", b"k1")]) == b"k1"
    assert presented_key([(b"authorization", b"Token k2")]) is None


# --- authorize= -------------------------------------------------------------------------------


async def test_sync_authorize_receives_scope_and_case_insensitive_headers() -> None:
    seen: list[tuple[str, str | None]] = []

    def authorize(scope: Any, headers: Headers) -> bool:
        seen.append((scope["path"], headers.get("X-Tenant")))
        return True

    guard = build_guard(_settings(), authorize)
    assert await guard.check(_scope((b"x-tenant", b"acme"))) == Admitted(None)
    assert seen == [("/v1/chat/completions", "acme")]


async def test_async_authorize_is_awaited_and_its_value_becomes_the_principal() -> None:
    async def authorize(scope: Any, headers: Headers) -> object:
        return {"tenant": headers.get("x-tenant")}

    guard = build_guard(_settings(), authorize)
    assert await guard.check(_scope((b"x-tenant", b"acme"))) == Admitted({"tenant": "acme"})


@pytest.mark.parametrize("verdict", [False, None])
@pytest.mark.parametrize(
    ("headers", "status"),
    [([], 401), ([(b"authorization", b"Bearer whatever")], 403), ([(b"x-api-key", b"whatever")], 403)],
    ids=["no-credentials", "bearer", "x-api-key"],
)
async def test_authorize_refusal_is_401_without_credentials_and_403_with(
    verdict: object, headers: list[tuple[bytes, bytes]], status: int
) -> None:
    guard = build_guard(_settings(), lambda scope, h: verdict)
    refused = await guard.check(_scope(*headers))
    assert isinstance(refused, RouterError)
    assert refused.status == status


@pytest.mark.parametrize("principal", [0, "", "user-7", ["a"]])
async def test_authorize_admits_any_value_other_than_false_or_none(principal: object) -> None:
    guard = build_guard(_settings(), lambda scope, h: principal)
    assert await guard.check(_scope()) == Admitted(principal)
