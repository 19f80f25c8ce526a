"""Security settings and the upstream header allowlist, checked at load and per request."""

from __future__ import annotations

import gc
import logging
from typing import Any

import pytest
from pydantic import ValidationError

from asgi_router import RouterSettings
from asgi_router.core.header_names import FORWARDED_REQUEST_HEADERS
from asgi_router.observability.redaction import REDACTED, scrub_while_alive, secrets_of
from asgi_router.responses.headers import response_headers_for_client
from asgi_router.transports.provider import ProviderRuntime
from asgi_router.transports.request_headers import request_headers_for_upstream

KEY = "inbound-key-0123456789abcdef"
_PROVIDERS = {"openai": {"base_url": "https://api.openai.com/v1"}}


def _provider(**kwargs: Any) -> dict[str, Any]:
    return {"openai": {"base_url": "https://api.openai.com/v1", **kwargs}}


# --- api_keys / allow_unauthenticated ----------------------------------------------------------


def test_api_keys_as_a_list_or_a_named_mapping_build_settings() -> None:
    assert RouterSettings(api_keys=[KEY]).api_keys is not None
    named = RouterSettings(api_keys={"alice": KEY}).api_keys
    assert isinstance(named, dict) and named["alice"].get_secret_value() == KEY


def test_api_keys_from_the_environment_are_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASGI_ROUTER_API_KEYS", f'["{KEY}"]')
    keys = RouterSettings().api_keys
    assert isinstance(keys, list) and keys[0].get_secret_value() == KEY


def test_allow_unauthenticated_from_the_environment_keeps_its_exact_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASGI_ROUTER_ALLOW_UNAUTHENTICATED", "true")
    assert RouterSettings().allow_unauthenticated is True
    assert RouterSettings(allow_unauthenticated=False, api_keys=[KEY]).allow_unauthenticated is False


@pytest.mark.parametrize(
    ("api_keys", "message"),
    [
        ([], "empty"),
        ({}, "empty"),
        (["short-key"], "shorter than 16"),
        (["has a space in it 0123"], "printable ASCII"),
        (["tab\tinside-0123456789"], "printable ASCII"),
        (["caf\u00e9-0123456789abcdef"], "printable ASCII"),
        ([KEY, KEY], "twice"),
        ({"a": KEY, "b": KEY}, "twice"),
        ({"bad name": KEY}, "api_keys.bad name"),
    ],
)
def test_unusable_api_keys_are_refused_without_echoing_them(api_keys: Any, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        RouterSettings(api_keys=api_keys)
    text = str(caught.value)
    assert message in text
    assert KEY[:5] not in text and "short-key" not in text


def test_allow_unauthenticated_together_with_api_keys_is_refused() -> None:
    with pytest.raises(ValidationError, match="contradicts api_keys"):
        RouterSettings(api_keys=[KEY], allow_unauthenticated=True)


def test_body_timeout_must_be_positive() -> None:
    assert RouterSettings(body_timeout=0.5, allow_unauthenticated=True).body_timeout == 0.5
    with pytest.raises(ValidationError, match="body_timeout"):
        RouterSettings(body_timeout=0, allow_unauthenticated=True)


# --- forward_headers and static headers ------------------------------------------------------


def test_forward_headers_are_lowercased_and_reach_the_provider_runtime() -> None:
    settings = RouterSettings(
        providers=_provider(forward_headers=["TraceParent", "x-tenant"]), allow_unauthenticated=True
    )
    runtime = ProviderRuntime.build("openai", settings.providers["openai"], settings.routes)
    target = runtime.targets["/v1/chat/completions"]
    assert not isinstance(target, str)
    assert target.forward == FORWARDED_REQUEST_HEADERS | {b"traceparent", b"x-tenant"}


@pytest.mark.parametrize(
    "name",
    [
        "Authorization",
        "cookie",
        "x-api-key",
        "api-key",
        "openai-organization",
        "proxy-authorization",
        "Proxy-Anything",
        "connection",
        "keep-alive",
        "te",
        "transfer-encoding",
        "upgrade",
        "trailer",
        "host",
        "content-length",
        "accept-encoding",
    ],
)
def test_forward_headers_naming_a_credential_or_hop_by_hop_header_is_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="never forwarded"):
        RouterSettings(providers=_provider(forward_headers=[name]))


@pytest.mark.parametrize("name", ["", "has space", "colon:name", "caf\u00e9"])
def test_forward_headers_that_are_not_tokens_are_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="not a valid HTTP token"):
        RouterSettings(providers=_provider(forward_headers=[name]))


@pytest.mark.parametrize("name", ["Transfer-Encoding", "connection", "host", "content-length", "proxy-authorization"])
def test_static_provider_headers_cannot_set_framing_or_hop_by_hop_headers(name: str) -> None:
    with pytest.raises(ValidationError, match="hop-by-hop or framing"):
        RouterSettings(providers=_provider(headers={name: "x"}))


# --- the allowlist per request ---------------------------------------------------------------

_INBOUND = [
    (b"content-type", b"application/json; charset=utf-8"),
    (b"accept", b"text/event-stream"),
    (b"user-agent", b"OpenAI/Python 1.0"),
    (b"x-request-id", b"client-chosen"),
    (b"traceparent", b"00-abc-def-01"),
    (b"x-tenant", b"acme"),
    (b"authorization", b"Bearer client-secret"),
    (b"cookie", b"session=1"),
    (b"x-api-key", b"client-secret"),
    (b"proxy-whatever", b"1"),
]


def test_fixed_allowlist_is_content_type_accept_user_agent_and_request_id() -> None:
    assert FORWARDED_REQUEST_HEADERS == {b"content-type", b"accept", b"user-agent", b"x-request-id"}
    headers = request_headers_for_upstream(_INBOUND, {}, "rid-1")
    assert headers == {
        "content-type": "application/json; charset=utf-8",
        "accept": "text/event-stream",
        "user-agent": "OpenAI/Python 1.0",
        "x-request-id": "rid-1",
    }


def test_provider_forward_headers_are_added_to_the_allowlist_for_that_provider_only() -> None:
    allowed = FORWARDED_REQUEST_HEADERS | {b"traceparent"}
    headers = request_headers_for_upstream(_INBOUND, {}, "rid-1", allowed)
    assert headers["traceparent"] == "00-abc-def-01"
    assert "x-tenant" not in headers
    assert "traceparent" not in request_headers_for_upstream(_INBOUND, {}, "rid-1")


def test_credentials_are_dropped_even_if_an_allowlist_names_them() -> None:
    allowed = FORWARDED_REQUEST_HEADERS | {b"authorization", b"cookie", b"x-api-key", b"proxy-whatever"}
    headers = request_headers_for_upstream(_INBOUND, {}, "rid-1", allowed)
    assert not {"authorization", "cookie", "x-api-key", "proxy-whatever"} & set(headers)


def test_headers_the_inbound_connection_header_names_are_hop_by_hop_and_dropped() -> None:
    inbound = [(b"connection", b"close, User-Agent, traceparent"), *_INBOUND]
    headers = request_headers_for_upstream(inbound, {}, "rid-1", FORWARDED_REQUEST_HEADERS | {b"traceparent"})
    assert "user-agent" not in headers
    assert "traceparent" not in headers
    assert "connection" not in headers
    assert headers["accept"] == "text/event-stream"


@pytest.mark.parametrize("name", [b"set-cookie", b"set-cookie2", b"alt-svc", b"proxy-authenticate", b"keep-alive"])
def test_upstream_cookies_alt_svc_and_hop_by_hop_headers_are_not_relayed(name: bytes) -> None:
    relayed = dict(response_headers_for_client([(name, b"x"), (b"content-type", b"application/json")]))
    assert name not in relayed
    assert relayed[b"content-type"] == b"application/json"


# --- the logger scrubs configured keys -------------------------------------------------------


def test_secrets_of_lists_provider_keys_from_config_and_environment_and_inbound_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ROUTER_TEST_PROVIDER_KEY", "env-provider-key-0123456789")
    settings = RouterSettings(
        providers={
            "a": {"base_url": "https://a.example/v1", "api_key": "config-provider-key-0123"},
            "b": {"base_url": "https://b.example/v1", "api_key_env": "ROUTER_TEST_PROVIDER_KEY"},
            "c": {"base_url": "https://c.example/v1"},
        },
        api_keys={"alice": KEY},
    )
    assert sorted(secrets_of(settings)) == sorted(["config-provider-key-0123", "env-provider-key-0123456789", KEY])


def test_router_logger_scrubs_a_registered_key_from_messages_and_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    secret = "scrub-me-0123456789abcdef"
    owner = Owner()
    scrub_while_alive(owner, [secret])
    caplog.set_level(logging.INFO, logger="asgi_router")
    try:
        raise ValueError(f"transport said: Bearer {secret}")
    except ValueError:
        logging.getLogger("asgi_router").exception("failed calling %s with %s", "openai/x", secret)
    record = caplog.records[-1]
    assert secret not in record.getMessage()
    assert REDACTED in record.getMessage()
    assert record.exc_text is not None and secret not in record.exc_text and REDACTED in record.exc_text
    assert secret not in caplog.text


class Owner:
    """Stands for a router: what a scrubbing filter lives as long as."""


def test_a_routers_secrets_are_scrubbed_only_while_it_lives(caplog: pytest.LogCaptureFixture) -> None:
    secret = "gone-with-router-0123456789"
    owner = Owner()
    filters_before = len(logging.getLogger("asgi_router").filters)
    scrub_while_alive(owner, [secret])
    assert len(logging.getLogger("asgi_router").filters) == filters_before + 1
    del owner
    gc.collect()
    assert len(logging.getLogger("asgi_router").filters) == filters_before  # nothing outlives it
