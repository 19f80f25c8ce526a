"""The headers an upstream request carries: the provider's own block plus an allowlist of the client's.

Upstream, the router sends an *allowlist*: ``content-type``, ``accept``, ``user-agent``,
``x-request-id``, plus what a provider's ``forward_headers`` names. A client's
``Authorization``, ``Cookie``, ``x-api-key`` or proxy headers never reach a provider (the
provider gets its own key), and neither does any header the inbound ``Connection`` names.

Everything in that rule but the client's headers is known when the router starts, so it is
decided then, once per route target: :class:`UpstreamHead` holds the provider's block, each
inbound name it may forward (already past the denylist, with the text key it is sent under) and
the defaults. Per request only the client's headers are walked, one dictionary look-up each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from asgi_router.core.header_names import FORWARDED_REQUEST_HEADERS, NO_TOKENS, connection_tokens, never_forwarded

__all__ = ["UpstreamHead", "request_headers_for_upstream"]

_CONNECTION: Final = b"connection"


class UpstreamHead:
    """One route target's upstream header rule, decided at start-up; :meth:`build` applies it.

    ``base`` (built once per provider) carries the provider's own ``Authorization``,
    ``content-type``, ``accept-encoding: identity`` and configured extras; inbound headers never
    override it. ``allowed`` is the provider's allowlist (the fixed one plus its
    ``forward_headers``); the denylist is applied to it here, once, and the inbound
    ``Connection`` tokens per request. ``defaults`` are sent when the client did not send the
    header itself (an Anthropic provider's ``anthropic-version``, which an Anthropic client's own
    overrides).
    """

    __slots__ = ("_base", "_defaults", "_forwarded", "_reads_connection")

    def __init__(
        self,
        base: Mapping[str, str],
        allowed: frozenset[bytes] = FORWARDED_REQUEST_HEADERS,
        defaults: Sequence[tuple[str, str]] = (),
    ) -> None:
        self._base = dict(base)
        #: Each inbound name that may be forwarded, with the key it is sent under.
        self._forwarded = {name: name.decode("latin-1") for name in allowed if not never_forwarded(name)}
        # An allowlisted ``Connection`` (which the denylist drops) is not read for tokens either.
        self._reads_connection = _CONNECTION not in allowed
        self._defaults = tuple(defaults)

    def build(self, inbound: Sequence[tuple[bytes, bytes]], request_id: str) -> dict[str, str]:
        """Headers for one upstream request: the block, the client's forwarded headers, the
        defaults it did not send, and the router's ``x-request-id``."""
        base = self._base
        headers = dict(base)
        forwarded = self._forwarded
        named = NO_TOKENS
        for name, value in inbound:
            key = forwarded.get(name)
            if key is not None:
                if key not in headers:
                    headers[key] = value.decode("latin-1")
            elif name == _CONNECTION and self._reads_connection:  # rare: undo what it names afterwards
                named = named | connection_tokens(value)
        for token in named:
            key = token.decode("latin-1")
            if key not in base:
                headers.pop(key, None)
        for default, text in self._defaults:
            headers.setdefault(default, text)
        headers["x-request-id"] = request_id
        return headers


def request_headers_for_upstream(
    inbound: Sequence[tuple[bytes, bytes]],
    base: Mapping[str, str],
    request_id: str,
    allowed: frozenset[bytes] = FORWARDED_REQUEST_HEADERS,
    defaults: Sequence[tuple[str, str]] = (),
) -> dict[str, str]:
    """Headers for the upstream request: the provider's ``base`` plus the allowlisted inbound
    (:class:`UpstreamHead`'s rule, decided for this one call; the router keeps one per route
    target instead)."""
    return UpstreamHead(base, allowed, defaults).build(inbound, request_id)
