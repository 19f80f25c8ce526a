"""Inbound auth: the router guards its own door, and will not start without a lock on it.

A middleware runs *before* the host app's routing, so the app's own auth (FastAPI dependencies,
route decorators) never sees the requests the router answers. Anyone who reaches an unguarded
router spends the operator's provider keys. So :func:`build_guard` insists on exactly one of:

``authorize=``
    a callable ``(scope, headers) -> bool | principal`` from the host app, sync or async.
    ``False`` or ``None`` refuses the request; ``True`` admits it; any other value admits it and
    becomes the request's principal (what event sinks see, e.g. a user or tenant id).
``RouterSettings(api_keys=[...])``
    keys a client presents as ``Authorization: Bearer <key>`` or, failing that, ``x-api-key``.
    Compared in constant time: both sides are hashed to SHA-256 and every configured key is
    compared (no early exit), so neither timing nor length says how close a guess was. The
    principal is the key's name when ``api_keys`` is a mapping, else ``key-`` and the first
    8 hex digits of the key's SHA-256 (stable across restarts, useless to an attacker).
``RouterSettings(allow_unauthenticated=True)``
    no check at all, for local development; :class:`~asgi_router.ModelRouter` logs a warning.

A refusal is 401 when the request carried no credentials (no bearer token, no ``x-api-key``)
and 403 when it carried some that were refused, OpenAI-shaped, before any upstream is chosen or
the body is read. Error messages never echo what the client sent.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from pydantic import SecretStr
from starlette.datastructures import Headers
from starlette.types import Scope

from .errors import RouterError
from .settings import ConfigError, RouterSettings

__all__ = ["Admitted", "Authorize", "Guard", "build_guard", "presented_key"]

#: The host app's check: ``(scope, headers) -> bool | principal``, or an awaitable of that.
Authorize = Callable[[Scope, Headers], object | Awaitable[object]]

_NO_AUTH: Final = (
    "ModelRouter refuses to start without inbound auth: a middleware runs before the host app's "
    "own auth, so anyone who can reach it would spend the providers' keys. Choose one of: "
    "authorize=<callable (scope, headers) -> bool | principal>; "
    "RouterSettings(api_keys=[...]); "
    "RouterSettings(allow_unauthenticated=True) (development only)."
)


@dataclass(frozen=True, slots=True)
class Admitted:
    """A request inbound auth let through, and who it belongs to."""

    principal: object = None


Verdict = Admitted | RouterError


class Guard(Protocol):
    """Decides, from the scope alone, whether a request may use the router."""

    def verdict(self, scope: Scope) -> Verdict | Awaitable[Verdict]:
        """The decision, or an awaitable of it when it needs awaiting (an async ``authorize=``):
        the router awaits only what must be awaited, not a coroutine per request."""
        ...

    async def check(self, scope: Scope) -> Verdict:
        """The decision, awaited."""
        ...


class _Guard:
    """:meth:`check` for every guard, from its :meth:`verdict`."""

    def verdict(self, scope: Scope) -> Verdict | Awaitable[Verdict]:
        raise NotImplementedError

    async def check(self, scope: Scope) -> Verdict:
        verdict = self.verdict(scope)
        return verdict if isinstance(verdict, (Admitted, RouterError)) else await verdict


def _unauthenticated(message: str) -> RouterError:
    return RouterError(401, "unauthenticated", message, headers=((b"www-authenticate", b"Bearer"),))


_DENIED: Final = RouterError(403, "permission_denied", "the credentials presented are not accepted here")


def presented_key(headers: Sequence[tuple[bytes, bytes]]) -> bytes | None:
    """The key a client presents: a bearer token if there is one, else ``x-api-key``."""
    api_key: bytes | None = None
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() == b"bearer" and token.strip():
                return token.strip()
        elif name == b"x-api-key" and api_key is None and value.strip():
            api_key = value.strip()
    return api_key


def _has_credentials(headers: Sequence[tuple[bytes, bytes]]) -> bool:
    return any(name in (b"authorization", b"x-api-key") and value.strip() for name, value in headers)


_NOBODY: Final = Admitted()


class _Open(_Guard):
    """``allow_unauthenticated=True``: everyone is admitted, as nobody."""

    def verdict(self, scope: Scope) -> Verdict:
        return _NOBODY


class _Keys(_Guard):
    """``api_keys``: a presented key must equal one of the configured keys."""

    def __init__(self, keys: list[SecretStr] | dict[str, SecretStr]) -> None:
        named = keys.items() if isinstance(keys, dict) else ((None, key) for key in keys)
        self._digests: tuple[tuple[bytes, str], ...] = tuple(
            (digest, name if name is not None else f"key-{digest.hex()[:8]}")
            for name, key in named
            for digest in (hashlib.sha256(key.get_secret_value().encode()).digest(),)
        )

    def verdict(self, scope: Scope) -> Verdict:
        token = presented_key(scope["headers"])
        if token is None:
            return _unauthenticated(
                "this endpoint needs an API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'"
            )
        digest = hashlib.sha256(token).digest()
        principal: str | None = None
        for known, name in self._digests:  # no early exit: every key costs the same
            if hmac.compare_digest(digest, known):
                principal = name
        return _DENIED if principal is None else Admitted(principal)


class _Callable(_Guard):
    """``authorize=``: the host app's own check, awaited if it is async."""

    def __init__(self, authorize: Authorize) -> None:
        self._authorize = authorize

    def verdict(self, scope: Scope) -> Verdict | Awaitable[Verdict]:
        verdict = self._authorize(scope, Headers(scope=scope))
        if inspect.isawaitable(verdict):
            return self._awaited(scope, verdict)
        return self._decide(scope, verdict)

    async def _awaited(self, scope: Scope, verdict: Awaitable[object]) -> Verdict:
        return self._decide(scope, await verdict)

    def _decide(self, scope: Scope, verdict: object) -> Verdict:
        if verdict is None or verdict is False:
            if _has_credentials(scope["headers"]):
                return _DENIED
            return _unauthenticated("this endpoint needs credentials")
        return Admitted(None if verdict is True else verdict)


def build_guard(settings: RouterSettings, authorize: Authorize | None) -> Guard:
    """The guard for these settings, or :class:`ConfigError` unless exactly one option is set."""
    chosen = [
        name
        for name, on in (
            ("authorize=", authorize is not None),
            ("api_keys", settings.api_keys is not None),
            ("allow_unauthenticated=True", settings.allow_unauthenticated),
        )
        if on
    ]
    if not chosen:
        raise ConfigError(_NO_AUTH)
    if len(chosen) > 1:
        raise ConfigError(f"inbound auth is configured twice ({' and '.join(chosen)}); choose one")
    if authorize is not None:
        if not callable(authorize):
            raise ConfigError("authorize= must be a callable (scope, headers) -> bool | principal")
        return _Callable(authorize)
    if settings.api_keys is not None:
        return _Keys(settings.api_keys)
    return _Open()
