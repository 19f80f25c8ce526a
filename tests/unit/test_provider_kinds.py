"""Provider settings for every protocol: ``kind``, the key's header, fixed query parameters, and
what each provider's per-route target becomes (URL, headers, translation, or why not)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pydantic import ValidationError
from starlette.applications import Starlette

from asgi_router import ModelRouter, ProviderSettings, RouterSettings
from asgi_router.transports.provider import ProviderRuntime, RouteTarget
from asgi_router.transports.request_headers import request_headers_for_upstream

_ROUTES = ["/v1/chat/completions", "/v1/messages", "/v1/embeddings"]


def _runtime(**settings: Any) -> ProviderRuntime:
    return ProviderRuntime.build("p", ProviderSettings(**settings), _ROUTES)


def _target(runtime: ProviderRuntime, route: str) -> RouteTarget:
    target = runtime.targets[route]
    assert isinstance(target, RouteTarget), target
    return target


@pytest.mark.parametrize(
    ("settings", "header", "value"),
    [
        ({}, "authorization", "Bearer sk-1"),
        ({"auth_header": "api-key"}, "api-key", "sk-1"),
        ({"auth_header": "X-Goog-Api-Key"}, "x-goog-api-key", "sk-1"),
        ({"kind": "anthropic"}, "x-api-key", "sk-1"),
        ({"kind": "anthropic", "auth_header": "authorization"}, "authorization", "Bearer sk-1"),
    ],
)
def test_the_key_goes_in_the_auth_header_bearer_only_for_authorization(
    settings: dict[str, Any], header: str, value: str
) -> None:
    runtime = _runtime(base_url="https://api.example.com/v1", api_key="sk-1", **settings)
    headers = _target(runtime, "/v1/chat/completions").headers
    assert headers[header] == value
    assert {"authorization", "x-api-key", "api-key", "x-goog-api-key"} & set(headers) == {header}


def test_query_parameters_are_encoded_onto_every_url() -> None:
    runtime = _runtime(
        base_url="https://r.openai.azure.com/openai/deployments/gpt4o",
        query={"api-version": "2024-10-21", "a b": "c&d"},
    )
    assert _target(runtime, "/v1/chat/completions").url == (
        "https://r.openai.azure.com/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21&a+b=c%26d"
    )
    assert _target(runtime, "/v1/embeddings").url.endswith("/embeddings?api-version=2024-10-21&a+b=c%26d")
    assert runtime.query == "?api-version=2024-10-21&a+b=c%26d"


def test_an_openai_provider_serves_every_openai_route_and_not_messages() -> None:
    runtime = _runtime(base_url="https://generativelanguage.googleapis.com/v1beta/openai")
    assert _target(runtime, "/v1/chat/completions").url == (
        "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions"
    )
    assert not _target(runtime, "/v1/chat/completions").translated
    assert runtime.targets["/v1/messages"] == "an OpenAI-protocol provider does not serve Anthropic's Messages API"


def test_an_anthropic_provider_translates_chat_and_relays_messages_at_one_url() -> None:
    runtime = _runtime(
        base_url="https://api.anthropic.com/v1", kind="anthropic", api_key="sk-ant", default_max_tokens=99
    )
    chat, messages = _target(runtime, "/v1/chat/completions"), _target(runtime, "/v1/messages")
    assert chat.url == messages.url == "https://api.anthropic.com/v1/messages"
    assert chat.translated and not messages.translated
    assert chat.headers["anthropic-version"] == "2023-06-01"
    assert "anthropic-version" not in messages.headers and messages.defaults == (("anthropic-version", "2023-06-01"),)
    assert {b"anthropic-version", b"anthropic-beta"} <= messages.forward
    assert runtime.targets["/v1/embeddings"] == (
        "an Anthropic provider serves chat completions, Messages and Responses (translated) only"
    )
    assert runtime.default_max_tokens == 99
    assert runtime.headers["anthropic-version"] == "2023-06-01"  # what a health probe sends


def test_the_responses_route_is_native_for_openai_unless_translated_and_always_translated_for_anthropic() -> None:
    routes = ["/v1/responses"]
    native = ProviderRuntime.build("p", ProviderSettings(base_url="https://api.openai.com/v1", api_key="sk-1"), routes)
    assert ProviderSettings(base_url="https://x.test/v1").responses == "native"
    target = _target(native, "/v1/responses")
    assert (target.url, target.translated, target.responses_via) == ("https://api.openai.com/v1/responses", False, None)
    chat = ProviderRuntime.build(
        "p", ProviderSettings(base_url="http://127.0.0.1:8000/v1", responses="translate", query={"v": "1"}), routes
    )
    target = _target(chat, "/v1/responses")
    assert (target.url, target.translated, target.responses_via) == (
        "http://127.0.0.1:8000/v1/chat/completions?v=1",
        True,
        "chat",
    )
    settings = ProviderSettings(base_url="https://api.anthropic.com/v1", kind="anthropic", api_key="sk-1")
    assert settings.responses == "translate"
    target = _target(ProviderRuntime.build("p", settings, routes), "/v1/responses")
    assert (target.url, target.translated, target.responses_via) == (
        "https://api.anthropic.com/v1/messages",
        True,
        "messages",
    )
    assert target.headers["anthropic-version"] == "2023-06-01"
    assert target.headers["x-api-key"] == "sk-1"


def test_a_clients_anthropic_version_wins_over_the_default_but_never_the_key() -> None:
    messages = _target(
        _runtime(base_url="https://api.anthropic.com/v1", kind="anthropic", api_key="sk-ant"), "/v1/messages"
    )
    inbound = [(b"anthropic-version", b"2024-01-01"), (b"anthropic-beta", b"b1"), (b"x-api-key", b"client")]
    sent = request_headers_for_upstream(inbound, messages.headers, "rid", messages.forward, messages.defaults)
    assert (sent["anthropic-version"], sent["anthropic-beta"], sent["x-api-key"]) == ("2024-01-01", "b1", "sk-ant")
    alone = request_headers_for_upstream([], messages.headers, "rid", messages.forward, messages.defaults)
    assert alone["anthropic-version"] == "2023-06-01"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"auth_header": "content-length"},
            "auth_header 'content-length' is a header the router or the transport sets",
        ),
        ({"auth_header": "proxy-authorization"}, "is a header the router or the transport sets"),
        ({"auth_header": "api key"}, "auth_header 'api key' is not a valid HTTP token"),
        ({"auth_header": ""}, "is not a valid HTTP token"),
        ({"query": {"": "1"}}, "query: a parameter name is empty"),
        ({"query": {"v": "1\n"}}, "has a control character"),
        ({"anthropic_version": "2023-06-01"}, 'anthropic_version applies to kind = "anthropic" only'),
        ({"default_max_tokens": 10}, 'default_max_tokens applies to kind = "anthropic" only'),
        ({"kind": "anthropic", "default_max_tokens": 0}, "greater than 0"),
        ({"kind": "anthropic", "anthropic_version": " "}, "anthropic_version is empty"),
        ({"kind": "anthropic", "headers": {"Anthropic-Version": "x"}}, "set anthropic-version with anthropic_version"),
        ({"kind": "gemini"}, "'openai' or 'anthropic'"),
        ({"api_key": "k", "auth_header": "api-key", "headers": {"api-key": "x"}}, "is the key's header"),
        ({"kind": "anthropic", "responses": "native"}, 'responses = "native" is not for kind = "anthropic"'),
        ({"responses": "stored"}, "'native' or 'translate'"),
    ],
)
def test_bad_provider_settings_are_refused_at_load(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RouterSettings(
            providers={"p": {"base_url": "https://api.example.com/v1", **settings}}, allow_unauthenticated=True
        )


def test_a_static_header_may_carry_a_credential_when_no_key_is_configured() -> None:
    # A gateway token in ``headers`` (no api_key): the header is the provider's to send as is.
    runtime = _runtime(base_url="https://gw.example.com/v1", headers={"Authorization": "Bearer gw-token"})
    assert _target(runtime, "/v1/chat/completions").headers["authorization"] == "Bearer gw-token"


def test_kind_and_auth_header_come_from_the_environment_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASGI_ROUTER_PROVIDERS__CLAUDE__BASE_URL", "https://api.anthropic.com/v1")
    monkeypatch.setenv("ASGI_ROUTER_PROVIDERS__CLAUDE__KIND", "anthropic")
    monkeypatch.setenv("ASGI_ROUTER_PROVIDERS__AZURE__BASE_URL", "https://r.openai.azure.com/openai/v1")
    monkeypatch.setenv("ASGI_ROUTER_PROVIDERS__AZURE__AUTH_HEADER", "api-key")
    monkeypatch.setenv("ASGI_ROUTER_PROVIDERS__AZURE__QUERY", '{"api-version": "preview"}')
    settings = RouterSettings(allow_unauthenticated=True)
    claude, azure = settings.providers["claude"], settings.providers["azure"]
    assert (claude.kind, claude.auth_header) == ("anthropic", "x-api-key")
    assert (azure.kind, azure.auth_header, azure.query) == ("openai", "api-key", {"api-version": "preview"})


def test_an_openai_kind_provider_with_anthropics_headers_is_warned_about_at_start_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    old = {"base_url": "https://api.anthropic.com/v1", "api_key": "sk-ant-0123456789", "auth_header": "x-api-key"}
    settings = RouterSettings(
        providers={"old": {**old, "headers": {"anthropic-version": "2023-06-01"}}, "new": {**old, "kind": "anthropic"}},
        allow_unauthenticated=True,
    )
    with caplog.at_level(logging.WARNING, logger="asgi_router"):
        ModelRouter(Starlette(), settings=settings)
    said = [record.getMessage() for record in caplog.records if "Anthropic's" in record.getMessage()]
    assert said == [
        "provider 'old' sends Anthropic's x-api-key and anthropic-version but speaks OpenAI's protocol "
        '(kind = "openai", the default): set kind = "anthropic" (its key goes in x-api-key by itself, and '
        "anthropic_version replaces the header); until then every /v1/messages request to it is refused with "
        "protocol_mismatch"
    ]


def test_a_downgrade_to_that_cannot_serve_a_route_is_warned_about_at_start_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = RouterSettings(
        providers={"openai": {"base_url": "https://api.openai.com/v1", "api_key": "sk-0123456789"}},
        groups={"cheap": {"members": ["openai/gpt-4o-mini"]}},
        routes=["/v1/chat/completions", "/v1/messages"],
        api_keys={"team-a": "sk-inbound-key-0123456789abcdef"},
        callers={"team-a": {"usd_per_day": 1.0, "downgrade_to": "group/cheap"}},
    )
    with caplog.at_level(logging.WARNING, logger="asgi_router"):
        ModelRouter(Starlette(), settings=settings)
    said = [record.getMessage() for record in caplog.records if "downgrade_to" in record.getMessage()]
    assert said == [
        "callers.team-a.downgrade_to group/cheap has no member that serves /v1/messages: its clients past the cap "
        "would be refused with protocol_mismatch"
    ]
