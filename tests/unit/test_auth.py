"""Inbound auth guards, one by one: which option, which status, which principal."""

from __future__ import annotations

import hashlib
import inspect
from typing import Any

import pytest
from pydantic import ValidationError
from starlette.datastructures import Headers

from asgi_router import ConfigError, Forbidden, RouterSettings
from asgi_router.core.router_errors import RouterError
from asgi_router.inbound.auth import Admitted, build_guard, presented_key

pytestmark = pytest.mark.anyio

KEY_A = "inbound-key-AAAA-0123456789"
KEY_B = "inbound-key-BBBB-9876543210"
_PROVIDERS = {"openai": {"base_url": "https://api.openai.com/v1"}}


def _scope(*headers: tuple[bytes, bytes]) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": list(headers)}


def _settings(**kwargs: Any) -> RouterSettings:
    return RouterSettings(providers=_PROVIDERS, **kwargs)


# --- choosing exactly one option --------------------------------------------------------------


def test_settings_without_an_auth_option_are_refused_naming_all_three() -> None:
    with pytest.raises(ValidationError) as caught:
        _settings()
    message = str(caught.value)
    assert "authorize=" in message
    assert "api_keys" in message
    assert "allow_unauthenticated=True" in message


def test_settings_made_without_validation_still_get_no_guard_without_auth() -> None:
    with pytest.raises(ConfigError, match="inbound auth is required"):
        build_guard(RouterSettings.model_construct())


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"api_keys": [KEY_A], "authorize": lambda scope, headers: True}, ("authorize=", "api_keys")),
        (
            {"allow_unauthenticated": True, "authorize": lambda scope, headers: True},
            ("authorize=", "allow_unauthenticated"),
        ),
    ],
)
def test_two_auth_options_at_once_are_refused_naming_both(kwargs: dict[str, Any], named: tuple[str, str]) -> None:
    with pytest.raises(ValidationError) as caught:
        _settings(**kwargs)
    assert all(name in str(caught.value) for name in named)


def test_authorize_that_is_not_callable_is_refused() -> None:
    with pytest.raises(ValidationError, match="callable"):
        _settings(authorize=42)


def test_authorize_as_an_import_string_names_the_callable() -> None:
    settings = _settings(authorize="tests.unit.test_auth:admit_everyone")
    assert settings.authorize is admit_everyone


def test_authorize_import_string_that_imports_nothing_is_refused() -> None:
    with pytest.raises(ValidationError, match="authorize"):
        _settings(authorize="tests.unit.no_such_module:check")


def admit_everyone(scope: Any, headers: Headers) -> bool:
    """An ``authorize`` for the import-string test."""
    return True


async def test_allow_unauthenticated_admits_a_request_without_credentials_as_nobody() -> None:
    guard = build_guard(_settings(allow_unauthenticated=True))
    assert await guard.check(_scope()) == Admitted(None)


def test_key_and_open_guards_decide_without_anything_to_await() -> None:
    # The router awaits a verdict only when it is awaitable: these two never need a coroutine.
    assert build_guard(_settings(allow_unauthenticated=True)).verdict(_scope()) == Admitted(None)
    verdict = build_guard(_settings(api_keys=[KEY_A])).verdict(_scope((b"x-api-key", KEY_A.encode())))
    assert isinstance(verdict, Admitted)


async def test_an_async_authorize_verdict_is_awaited_and_a_sync_one_is_not() -> None:
    async def later(scope: Any, headers: Any) -> str:
        return "tenant-a"

    pending = build_guard(_settings(authorize=later)).verdict(_scope())
    assert inspect.isawaitable(pending)
    assert await pending == Admitted("tenant-a")
    assert build_guard(_settings(authorize=lambda scope, headers: "tenant-b")).verdict(_scope()) == Admitted("tenant-b")


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
    guard = build_guard(_settings(api_keys=[KEY_A, KEY_B]))
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
    guard = build_guard(_settings(api_keys=[KEY_A]))
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
async def test_wrong_api_key_is_401_invalid_api_key_and_the_message_does_not_echo_it(token: str) -> None:
    guard = build_guard(_settings(api_keys=[KEY_A]))
    refused = await guard.check(_scope((b"authorization", f"Bearer {token}".encode())))
    assert isinstance(refused, RouterError)
    assert (refused.status, refused.code) == (401, "invalid_api_key")  # as OpenAI answers an unknown key
    assert (b"www-authenticate", b"Bearer") in refused.headers
    assert token not in refused.message and KEY_A[:5] not in refused.message


async def test_bearer_token_wins_over_x_api_key_when_both_are_sent() -> None:
    guard = build_guard(_settings(api_keys=[KEY_A]))
    refused = await guard.check(
        _scope((b"authorization", b"Bearer wrong-key-0000000000"), (b"x-api-key", KEY_A.encode()))
    )
    assert isinstance(refused, RouterError) and refused.status == 401


async def test_listed_key_principal_is_a_sha256_fingerprint_not_the_key() -> None:
    guard = build_guard(_settings(api_keys=[KEY_A, KEY_B]))
    admitted = await guard.check(_scope((b"x-api-key", KEY_B.encode())))
    assert admitted == Admitted(f"key-{hashlib.sha256(KEY_B.encode()).hexdigest()[:8]}")
    assert isinstance(admitted, Admitted) and KEY_B[:5] not in str(admitted.principal)


async def test_named_key_principal_is_its_name() -> None:
    guard = build_guard(_settings(api_keys={"alice": KEY_A, "bob": KEY_B}))
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

    guard = build_guard(_settings(authorize=authorize))
    assert await guard.check(_scope((b"x-tenant", b"acme"))) == Admitted(None)
    assert seen == [("/v1/chat/completions", "acme")]


async def test_async_authorize_is_awaited_and_its_value_becomes_the_principal() -> None:
    async def authorize(scope: Any, headers: Headers) -> object:
        return {"tenant": headers.get("x-tenant")}

    guard = build_guard(_settings(authorize=authorize))
    assert await guard.check(_scope((b"x-tenant", b"acme"))) == Admitted({"tenant": "acme"})


@pytest.mark.parametrize("verdict", [False, None])
@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ([], "unauthenticated"),
        ([(b"authorization", b"Bearer whatever")], "invalid_api_key"),
        ([(b"x-api-key", b"whatever")], "invalid_api_key"),
    ],
    ids=["no-credentials", "bearer", "x-api-key"],
)
async def test_authorize_returning_false_or_none_is_401_with_or_without_credentials(
    verdict: object, headers: list[tuple[bytes, bytes]], code: str
) -> None:
    guard = build_guard(_settings(authorize=lambda scope, h: verdict))
    refused = await guard.check(_scope(*headers))
    assert isinstance(refused, RouterError)
    assert (refused.status, refused.code) == (401, code)
    assert (b"www-authenticate", b"Bearer") in refused.headers


async def test_authorize_raising_forbidden_is_403_with_its_message_sync_or_async() -> None:
    def sync(scope: Any, headers: Headers) -> object:
        raise Forbidden("the batch key may not use interactive models")

    async def later(scope: Any, headers: Headers) -> object:
        raise Forbidden()

    refused = await build_guard(_settings(authorize=sync)).check(_scope((b"x-api-key", b"k")))
    assert isinstance(refused, RouterError)
    assert (refused.status, refused.code) == (403, "permission_denied")
    assert refused.message == "the batch key may not use interactive models"
    assert not refused.headers  # no challenge: other credentials would not help
    refused = await build_guard(_settings(authorize=later)).check(_scope())
    assert isinstance(refused, RouterError)
    assert (refused.status, refused.code) == (403, "permission_denied") and refused.message


@pytest.mark.parametrize("principal", [0, "", "user-7", ["a"]])
async def test_authorize_admits_any_value_other_than_false_or_none(principal: object) -> None:
    guard = build_guard(_settings(authorize=lambda scope, h: principal))
    assert await guard.check(_scope()) == Admitted(principal)
