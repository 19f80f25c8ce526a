"""One request's body as an OpenAI-protocol provider's prompt cache wants it, built once.

With ``prompt_cache = "auto"`` (``config/prompt_cache_settings.py``) a chat request sent to an
OpenAI-protocol provider goes without Anthropic's ``cache_control`` marks (a strict server would
refuse them: ``protocols/cache_marks.py``), and to a provider with ``prompt_cache_key`` on it
carries the session's digest as ``prompt_cache_key`` unless the client set one: the digest a
session-keyed sticky group keys on (``routing/sticky_keys.py``), so that the member a session
sticks to and the provider's cache routing agree, and the session id itself never leaves.

Either change means serialising the payload again (:class:`~asgi_router.attempts.wire_body.WireBody`);
a request that needs neither, nearly every one, is sent as it came (the caller checks the marks
with one search of the body's bytes before it makes one of these).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from asgi_router.attempts.wire_body import SplicedBody, WireBody
from asgi_router.inbound.session_id import session_value
from asgi_router.protocols.cache_marks import without_marks
from asgi_router.routing.sticky_keys import sticky_key
from asgi_router.transports.provider import PromptCaching

__all__ = ["CACHE_KEY", "CacheBodies"]

#: The request field OpenAI routes a prompt to its cache by.
CACHE_KEY = "prompt_cache_key"


class CacheBodies:
    """One request's body builders for the prompt caches of its OpenAI-protocol candidates."""

    __slots__ = ("_built", "_headers", "_payload", "_plain", "_stripped")

    def __init__(
        self, payload: Mapping[str, Any], headers: Sequence[tuple[bytes, bytes]], plain: SplicedBody | WireBody
    ) -> None:
        self._payload = payload
        self._headers = headers
        #: The body as the client sent it (with the model spliced in): where nothing changes.
        self._plain = plain
        #: The payload without marks (``None``: it has none), once looked for.
        self._stripped: dict[str, Any] | bool | None = False
        #: The builders made so far, by the ``prompt_cache_key`` they add (``None``: none).
        self._built: dict[str | None, WireBody] = {}

    def _key(self, caching: PromptCaching) -> str | None:
        """The ``prompt_cache_key`` to add for ``caching``'s provider: the session's digest, when
        the provider takes one, the request names a session and the client set no key."""
        header = caching.cache_key_header
        if header is None or self._payload.get(CACHE_KEY) is not None:
            return None
        session = session_value(self._headers, header)
        return sticky_key("session", self._payload, session.decode("latin-1"), None) if session is not None else None

    def for_target(self, caching: PromptCaching) -> SplicedBody | WireBody:
        """The body builder for a candidate whose provider's prompt cache asks ``caching``."""
        stripped = self._stripped
        if stripped is False:
            stripped = self._stripped = without_marks(self._payload)
        assert not isinstance(stripped, bool)
        if not caching.strip_marks:
            stripped = None
        key = self._key(caching)
        if stripped is None and key is None:
            return self._plain
        built = self._built.get(key)
        if built is None:
            payload = dict(stripped if stripped is not None else self._payload)
            if key is not None:
                payload[CACHE_KEY] = key
            built = self._built[key] = WireBody(payload)
        return built
