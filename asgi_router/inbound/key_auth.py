"""Inbound auth with virtual keys: keys issued at runtime, beside the configured inbound auth.

A presented key of a virtual key's form (``sk-ar-...``) is hashed and found in this process's
key ring (``keys/key_ring.py``): no database round trip for a key the ring knows. A key it
knows admits the request as its caller (the principal the caller caps and metrics name), unless
it is revoked, disabled or expired: then a 401 ``invalid_api_key``, as for an unknown key. A key
the ring does not know is looked up once in the table (a key just created on another host), the
look-ups bounded by the ring. Everything else goes to the configured inbound auth (``inner``):
``api_keys`` beside virtual keys, or ``authorize=`` for the rest (virtual keys are checked
first); with neither (``admin_keys`` alone), virtual keys are the inbound auth and anything else
is refused.

After the body is read, a key with ``groups`` may only ask for those refs
(:func:`model_refusal`): a 403 ``model_not_allowed``, whose message starts with the code on
Anthropic's route (its error shape has no code field).
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any, Final

from starlette.types import Scope

from asgi_router.core.router_errors import RouterError
from asgi_router.inbound.auth import Admitted, Guard, Verdict, presented_key
from asgi_router.keys.key_ring import KeyRing
from asgi_router.keys.key_secrets import is_virtual, key_digest
from asgi_router.keys.virtual_key import VirtualKey, allowed

__all__ = ["KeyGuard", "model_refusal"]

#: Verdicts kept at most (past it they are made again, one per key, as requests come).
_MOST_VERDICTS: Final = 100_000
_CHALLENGE: Final = ((b"www-authenticate", b"Bearer"),)
_INVALID: Final = RouterError(
    401, "invalid_api_key", "the credentials presented are not valid here", headers=_CHALLENGE
)
_NO_KEY: Final = RouterError(
    401,
    "unauthenticated",
    "this endpoint needs an API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'",
    headers=_CHALLENGE,
)


class KeyGuard:
    """Virtual keys first, then the configured inbound auth (see the module docstring)."""

    def __init__(self, ring: KeyRing, inner: Guard | None) -> None:
        self.ring = ring
        self._inner = inner
        #: Each key's verdict, made once per version of the key (the ring's object): a request
        #: admitted by a known key allocates nothing here. Bounded as the ring's misses are.
        self._verdicts: dict[str, Admitted] = {}

    def verdict(self, scope: Scope) -> Verdict | Awaitable[Verdict]:
        return self.verdict_for(scope, presented_key(scope["headers"]))

    def verdict_for(self, scope: Scope, token: bytes | None) -> Verdict | Awaitable[Verdict]:
        if token is not None and is_virtual(token):
            ring = self.ring
            digest = key_digest(token)
            key = ring.find(digest)
            if key is not None:
                return self._admitted(key, digest)
            if ring.may_look_up(digest):
                return self._looked_up(scope, digest)
        return self._rest(scope, token)

    def _admitted(self, key: VirtualKey, digest: bytes) -> Verdict:
        if not key.opens(digest, self.ring.wall()):
            return _INVALID
        verdicts = self._verdicts
        verdict = verdicts.get(key.id)
        if verdict is None or verdict.key is not key:
            if len(verdicts) >= _MOST_VERDICTS:
                verdicts.clear()
            verdict = verdicts[key.id] = Admitted(key.caller, key)
        return verdict

    async def _looked_up(self, scope: Scope, digest: bytes) -> Verdict:
        key = await self.ring.look_up(digest)
        if key is not None:
            return self._admitted(key, digest)
        return await self._inner.check(scope) if self._inner is not None else _INVALID

    def _rest(self, scope: Scope, token: bytes | None) -> Verdict | Awaitable[Verdict]:
        if self._inner is not None:
            return self._inner.verdict_for(scope, token)  # the key found once, not twice
        return _NO_KEY if token is None else _INVALID

    async def check(self, scope: Scope) -> Verdict:
        verdict = self.verdict(scope)
        return verdict if isinstance(verdict, (Admitted, RouterError)) else await verdict

    async def check_page(self, scope: Scope) -> Verdict:
        token = presented_key(scope["headers"])
        if (token is not None and is_virtual(token)) or self._inner is None:
            return await self.check(scope)
        return await self._inner.check_page(scope)


def model_refusal(
    groups: tuple[str, ...], payload: Mapping[str, Any], aliases: Mapping[str, str], anthropic: bool
) -> RouterError | None:
    """The 403 for a key asking for a ref outside its ``groups`` (``None``: allowed)."""
    model = payload.get("model")
    if not isinstance(model, str) or allowed(groups, model, aliases):
        return None  # a missing or malformed model gets its own error from the plan phase
    words = "this key may not use the model asked for; its groups list the models it may use"
    return RouterError(403, "model_not_allowed", f"model_not_allowed: {words}" if anthropic else words)
