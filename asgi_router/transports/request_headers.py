"""The headers an upstream request carries: the provider's own block plus an allowlist of the client's.

Upstream, the router sends an *allowlist*: ``content-type``, ``accept``, ``user-agent``,
``x-request-id``, plus what a provider's ``forward_headers`` names. A client's
``Authorization``, ``Cookie``, ``x-api-key`` or proxy headers never reach a provider (the
provider gets its own key), and neither does any header the inbound ``Connection`` names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from asgi_router.core.header_names import FORWARDED_REQUEST_HEADERS, NO_TOKENS, connection_tokens, never_forwarded

__all__ = ["request_headers_for_upstream"]


def request_headers_for_upstream(
    inbound: Sequence[tuple[bytes, bytes]],
    base: Mapping[str, str],
    request_id: str,
    allowed: frozenset[bytes] = FORWARDED_REQUEST_HEADERS,
    defaults: Sequence[tuple[str, str]] = (),
) -> dict[str, str]:
    """Headers for the upstream request: the provider's ``base`` plus the allowlisted inbound.

    ``base`` (built once per provider) carries the provider's own ``Authorization``,
    ``content-type``, ``accept-encoding: identity`` and configured extras; inbound headers never
    override it. ``allowed`` is the provider's allowlist (the fixed one plus its
    ``forward_headers``); the denylist and the inbound ``Connection`` tokens are applied on top.
    ``defaults`` are sent when the client did not send the header itself (an Anthropic
    provider's ``anthropic-version``, which an Anthropic client's own overrides).
    """
    headers = dict(base)
    named = NO_TOKENS
    for name, value in inbound:
        if name in allowed:
            if not never_forwarded(name):
                key = name.decode("latin-1")
                if key not in headers:
                    headers[key] = value.decode("latin-1")
        elif name == b"connection":  # rare enough to undo what it names afterwards
            named = named | connection_tokens(value)
    for token in named:
        key = token.decode("latin-1")
        if key not in base:
            headers.pop(key, None)
    for default, text in defaults:
        headers.setdefault(default, text)
    headers["x-request-id"] = request_id
    return headers
