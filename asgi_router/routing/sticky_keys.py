"""A sticky group's key for one request: its session, its caller, or its prompt's prefix.

Every key is a hash: a session id and a caller's name are the client's words, and a prompt
prefix is the client's text, which must never be stored (not in memory, not in a shared
store). Hashing also gives every key the same small size, whatever a client sends, so the
affinity table's bound (``max_keys``) bounds its memory too. The prefix is what a provider's
prompt cache reuses first: the system message(s) (an Anthropic request's top-level ``system``
too) and the first user message.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from asgi_router.config.capacity_settings import StickyKey

__all__ = ["sticky_key"]

_SYSTEM_ROLES: Final = frozenset({"system", "developer"})


# One keyed-hash state per kind of key, never updated itself: each key's digest starts from a
# copy, which is cheaper than building the parametrised hash per request (and gives the same
# digests, which a fleet's store holds across versions).
_HASHES: Final = {kind: hashlib.blake2b(digest_size=16, person=kind) for kind in (b"session", b"principal", b"prefix")}


def _digest(kind: bytes, text: bytes) -> str:
    digest = _HASHES[kind].copy()
    digest.update(text)
    return digest.hexdigest()


def _prefix(payload: Mapping[str, Any]) -> bytes | None:
    """The system message(s) and the first user message, serialised; ``None`` without either."""
    parts: list[Any] = []
    system = payload.get("system")
    if system is not None:
        parts.append(system)
    messages = payload.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if not isinstance(message, dict):
                continue
            role = message.get("role")
            if role in _SYSTEM_ROLES:
                parts.append(message.get("content"))
            elif role == "user":
                parts.append(message.get("content"))
                break
    if not parts:
        return None
    return json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sticky_key(kind: StickyKey, payload: Mapping[str, Any], session: str | None, principal: object) -> str | None:
    """The request's affinity key (a hex digest), or ``None`` when it has none (routed as usual).

    ``session`` is the value of the router's ``session_header``, ``principal`` whom inbound
    auth admitted (``None`` when serving unauthenticated).
    """
    if kind == "session":
        return _digest(b"session", session.encode()) if session else None
    if kind == "principal":
        return _digest(b"principal", str(principal).encode()) if principal is not None else None
    prefix = _prefix(payload)
    return _digest(b"prefix", prefix) if prefix is not None else None
