"""A request's response-cache key: what must be equal for a stored answer to answer it.

The body is parsed already; it is re-serialised with sorted keys and no insignificant
whitespace (string contents unchanged), so two clients that order their fields differently, or
indent them, ask the same thing. Left out are the fields that change how an answer is delivered
or labelled, not what it says: ``stream`` and ``stream_options`` (one entry answers both
shapes), ``user``, ``metadata`` and ``store``. Hashed in with it: the route's protocol (an
OpenAI entry never answers a Messages request), the ref whose plan ran (after aliases, rules and
a caller cap's ``downgrade_to``: the group, and the rule that chose its plan) and, unless the
group shares its entries, the caller: an answer never crosses callers, since a prompt may carry
one caller's data and its answer repeat it.

A semantic lookup (``cache.semantic``) also needs the *context* key: the same hash over the
request with its last user message left out, so a paraphrase only ever hits within the same
conversation ("Yes" after two different questions are two different requests).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["IGNORED_FIELDS", "cache_key", "context_key", "last_user_text"]

#: Top-level fields that do not change what the answer says.
IGNORED_FIELDS: Final = frozenset({"stream", "stream_options", "user", "metadata", "store"})


def _canonical(payload: Mapping[str, Any]) -> bytes:
    kept = {name: value for name, value in payload.items() if name not in IGNORED_FIELDS}
    return json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _digest(canonical: bytes, protocol: str, ref: str, caller: str | None) -> str:
    # Each part is length-prefixed, so no choice of names can make two parts read as others.
    hasher = hashlib.sha256()
    for part in (protocol.encode(), ref.encode(), (caller or "").encode(), canonical):
        hasher.update(b"%d:" % len(part))
        hasher.update(part)
    return hasher.hexdigest()


def cache_key(payload: Mapping[str, Any], protocol: str, ref: str, caller: str | None) -> str:
    """The exact key of ``payload`` asked on a ``protocol`` route, planned as ``ref``, for
    ``caller`` (``None``: the group shares its entries)."""
    return _digest(_canonical(payload), protocol, ref, caller)


def _last_user_index(messages: object) -> int | None:
    if not isinstance(messages, list):
        return None
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, dict) and message.get("role") == "user":
            return index
    return None


def last_user_text(payload: Mapping[str, Any]) -> str | None:
    """The text of the last user message (its text parts joined), or ``None`` when it has none."""
    messages = payload.get("messages")
    index = _last_user_index(messages)
    if index is None:
        return None
    assert isinstance(messages, list)
    content = messages[index].get("content")
    if isinstance(content, str):
        return content or None
    if isinstance(content, list):
        texts = [part.get("text") for part in content if isinstance(part, dict) and part.get("type") == "text"]
        joined = "\n".join(text for text in texts if isinstance(text, str))
        return joined or None
    return None


def context_key(payload: Mapping[str, Any], protocol: str, ref: str, caller: str | None) -> str | None:
    """The key of everything but the last user message (``None``: the request has none)."""
    messages = payload.get("messages")
    index = _last_user_index(messages)
    if index is None:
        return None
    assert isinstance(messages, list)
    rest = {**payload, "messages": [*messages[:index], {"role": "user"}, *messages[index + 1 :]]}
    return cache_key(rest, protocol, ref, caller)
