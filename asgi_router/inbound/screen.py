"""Screen a chat request for what must never reach an upstream, before it is routed.

Two checks, each a pure function returning a :class:`RouterError` or ``None``:

* :func:`screen_headers` (before the body is read): the body must be declared as
  ``application/json`` and must not be compressed. A compressed body would have to be inflated
  to be routed, and a few KB can inflate to gigabytes; any other media type is a client bug or
  a browser form posted cross-site, and refusing it costs nothing. Both are 415.
* :func:`forbidden_field` (after parsing): top-level fields that other gateways' SDKs read as
  *where to send the request* or *which credentials to use* (``api_base``, ``api_key``,
  ``extra_headers``, ...). Gateways have shipped exactly this bug: a client-supplied
  ``api_base`` that sent the server's provider key to the client's host. The router never
  reads these, but an upstream that is itself such a gateway might, so they are refused (400)
  rather than forwarded. Names are compared case-insensitively and ignoring ``_`` and ``-``
  (``apiBase``, ``API-BASE``); only the top level is checked, since that is what upstreams read
  as parameters (nested objects such as ``messages`` and ``metadata`` are the caller's data).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from starlette.types import Scope

from asgi_router.core.router_errors import RouterError

__all__ = ["FORBIDDEN_FIELDS", "forbidden_field", "screen_headers"]

#: Request fields refused with 400, as written in the SDKs and gateways that read them.
FORBIDDEN_FIELDS: Final = (
    # where the request goes
    "api_base",
    "base_url",
    "api_url",
    "api_endpoint",
    "azure_endpoint",
    "custom_llm_provider",
    "api_type",
    "api_version",
    "deployment_id",
    "azure_deployment",
    "engine",
    "proxy",
    "proxies",
    "http_client",
    "litellm_params",
    # whose credentials and account it uses
    "api_key",
    "openai_api_key",
    "azure_ad_token",
    "azure_ad_token_provider",
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "vertex_credentials",
    "organization",
    "openai_organization",
    "project",
    "openai_project",
    # what else travels with it
    "extra_headers",
    "default_headers",
    "headers",
    "extra_query",
    "default_query",
    "extra_body",
)


def _normal(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


_FORBIDDEN: Final[dict[str, str]] = {_normal(name): name for name in FORBIDDEN_FIELDS}

# Chat-completion parameters as OpenAI spells them: none is forbidden, so they skip the
# normalisation (what almost every request carries costs a set lookup per field).
_COMMON: Final = frozenset(
    {
        "model",
        "messages",
        "stream",
        "stream_options",
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
        "n",
        "stop",
        "seed",
        "user",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "reasoning_effort",
        "metadata",
        "store",
    }
)
if any(_normal(name) in _FORBIDDEN for name in _COMMON):  # pragma: no cover - a bad edit above
    raise AssertionError("a common chat parameter normalises to a forbidden field")


def forbidden_field(payload: Mapping[str, Any]) -> RouterError | None:
    """A 400 naming the first forbidden top-level field of ``payload``, if it has one.

    The message names the field as this module spells it, never as the client did.
    """
    for key in payload:
        if key in _COMMON:
            continue
        canonical = _FORBIDDEN.get(_normal(key))
        if canonical is not None:
            return RouterError(
                400,
                "forbidden_parameter",
                f"request field {canonical!r} is not accepted: the router chooses the upstream, "
                "its credentials and its headers",
            )
    return None


def _media_type(value: bytes) -> bytes:
    if value == b"application/json":  # as nearly every client sends it
        return value
    return value.split(b";", 1)[0].strip().lower()


def screen_headers(scope: Scope) -> RouterError | None:
    """A 415 when the body is not declared as uncompressed JSON; else ``None``."""
    content_type: bytes | None = None
    encoding: bytes | None = None
    for name, value in scope["headers"]:
        if name == b"content-type" and content_type is None:
            content_type = value
        elif name == b"content-encoding" and encoding is None:
            encoding = value
    if encoding is not None and encoding.strip().lower() not in (b"", b"identity"):
        return RouterError(
            415,
            "unsupported_content_encoding",
            "compressed request bodies are not accepted; send the JSON body without Content-Encoding",
        )
    if content_type is None or _media_type(content_type) != b"application/json":
        return RouterError(
            415,
            "unsupported_media_type",
            "the request body must be JSON sent with 'Content-Type: application/json'",
        )
    return None
