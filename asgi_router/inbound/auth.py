"""Inbound auth: the router guards its own door, and will not start without a lock on it.

A middleware runs *before* the host app's routing, so the app's own auth (FastAPI dependencies,
route decorators) never sees the requests the router answers. Anyone who reaches an unguarded
router spends the operator's provider keys. So the settings insist on exactly one of (checked
when they are built, see :mod:`asgi_router.config.auth_settings`; :func:`build_guard` checks again):

``authorize``
    a callable ``(scope, headers) -> bool | principal`` from the host app, sync or async (or its
    import string). ``False`` or ``None`` refuses the request as unauthenticated; ``True``
    admits it; any other value admits it and becomes the request's principal (what event sinks
    see, e.g. a user or tenant id). Raising :class:`Forbidden` refuses a principal it *knows*.
``api_keys``
    keys a client presents as ``Authorization: Bearer <key>`` or, failing that, ``x-api-key``.
    Compared in constant time: both sides are hashed to SHA-256 and every configured key is
    compared (no early exit), so neither timing nor length says how close a guess was. The
    principal is the key's name when ``api_keys`` is a mapping, else ``key-`` and the first
    8 hex digits of the key's SHA-256 (stable across restarts, useless to an attacker).
``allow_unauthenticated=True``
    no check at all, for local development; :class:`~asgi_router.ModelRouter` logs a warning.

The statuses are OpenAI's (and LiteLLM's), because client code branches on them: **401** with
``WWW-Authenticate: Bearer`` when no credentials came or the ones that came are not valid (an
unknown key: the SDKs raise ``AuthenticationError``, which is what code catching a bad key
expects), **403** only for a known principal that ``authorize`` refuses with
:class:`Forbidden` (``PermissionDeniedError``). Both are OpenAI-shaped and answered before any
upstream is chosen or the body is read. Error messages never echo what the client sent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import inspect
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from pydantic import SecretStr
from starlette.datastructures import Headers
from starlette.types import Scope

from asgi_router.config.auth_settings import NO_INBOUND_AUTH, Authorize
from asgi_router.config.config_error import ConfigError
from asgi_router.config.settings import RouterSettings
from asgi_router.core.router_errors import RouterError
from asgi_router.keys.virtual_key import VirtualKey

__all__ = ["Admitted", "Forbidden", "Guard", "Verdict", "build_guard", "chose_inbound_auth", "presented_key"]

_FORBIDDEN: Final = "these credentials are not allowed to use this endpoint"


class Forbidden(Exception):
    """Raised by an ``authorize`` callable to refuse a principal it recognised: a **403**.

    Returning ``False`` or ``None`` says "I do not know who this is" (a 401, which clients read
    as "fix your key"); ``raise Forbidden()`` says "I know you, and the answer is no" (a 403,
    ``PermissionDeniedError`` in the ``openai`` SDK). ``message`` is sent to the client as is,
    so it must not carry anything the client should not read.
    """

    def __init__(self, message: str = _FORBIDDEN) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class Admitted:
    """A request inbound auth let through, and who it belongs to."""

    principal: object = None
    #: The virtual key it presented (``None``: a configured key, ``authorize=`` or no auth).
    key: VirtualKey | None = None


Verdict = Admitted | RouterError


class Guard(Protocol):
    """Decides, from the scope alone, whether a request may use the router."""

    def verdict(self, scope: Scope) -> Verdict | Awaitable[Verdict]:
        """The decision, or an awaitable of it when it needs awaiting (an async ``authorize=``):
        the router awaits only what must be awaited, not a coroutine per request."""
        ...

    def verdict_for(self, scope: Scope, token: bytes | None) -> Verdict | Awaitable[Verdict]:
        """:meth:`verdict` for a request whose presented key was found already (``token``:
        :func:`presented_key`'s answer), so that a guard in front (virtual keys) and this one
        do not both search the headers for it."""
        ...

    async def check(self, scope: Scope) -> Verdict:
        """The decision, awaited."""
        ...

    async def check_page(self, scope: Scope) -> Verdict:
        """The decision for the router's own pages (status, metrics), which a person's browser or
        a scraper may ask for: ``api_keys`` also come as the password of HTTP Basic auth."""
        ...


class _Guard(ABC):
    """:meth:`check` for every guard, from its :meth:`verdict`."""

    @abstractmethod
    def verdict(self, scope: Scope) -> Verdict | Awaitable[Verdict]:
        """The decision, or an awaitable of it (see :class:`Guard`)."""

    def verdict_for(self, scope: Scope, token: bytes | None) -> Verdict | Awaitable[Verdict]:
        return self.verdict(scope)  # a guard that does not read a key itself

    async def check(self, scope: Scope) -> Verdict:
        verdict = self.verdict(scope)
        return verdict if isinstance(verdict, (Admitted, RouterError)) else await verdict

    async def check_page(self, scope: Scope) -> Verdict:
        return await self.check(scope)  # authorize= reads the headers itself, Basic included


_CHALLENGE: Final = ((b"www-authenticate", b"Bearer"),)
_NO_KEY: Final = RouterError(
    401,
    "unauthenticated",
    "this endpoint needs an API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'",
    headers=_CHALLENGE,
)
_NO_CREDENTIALS: Final = RouterError(401, "unauthenticated", "this endpoint needs credentials", headers=_CHALLENGE)
_INVALID: Final = RouterError(
    401, "invalid_api_key", "the credentials presented are not valid here", headers=_CHALLENGE
)


def _forbidden(refusal: Forbidden) -> RouterError:
    return RouterError(403, "permission_denied", refusal.message or _FORBIDDEN)


def _basic_password(credentials: bytes) -> bytes | None:
    """The password of HTTP Basic credentials (``base64(user:password)``), if they decode."""
    try:
        decoded = base64.b64decode(credentials, validate=True)
    except ValueError:
        return None
    _, colon, password = decoded.partition(b":")
    return password if colon and password else None


def presented_key(headers: Sequence[tuple[bytes, bytes]], *, basic: bool = False) -> bytes | None:
    """The key a client presents: a bearer token if there is one, else ``x-api-key``; with
    ``basic``, also the password of HTTP Basic auth (what a browser sends when asked)."""
    api_key: bytes | None = None
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            scheme, token = scheme.lower(), token.strip()
            if scheme == b"bearer" and token:
                return token
            if basic and scheme == b"basic" and (password := _basic_password(token)) is not None:
                return password
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
        # Each key's verdict is made once: a request admitted by a config key allocates nothing.
        self._digests: tuple[tuple[bytes, Admitted], ...] = tuple(
            (digest, Admitted(name if name is not None else f"key-{digest.hex()[:8]}"))
            for name, key in named
            for digest in (hashlib.sha256(key.get_secret_value().encode()).digest(),)
        )

    def verdict(self, scope: Scope) -> Verdict:
        return self._decide(presented_key(scope["headers"]))

    def verdict_for(self, scope: Scope, token: bytes | None) -> Verdict:
        return self._decide(token)

    async def check_page(self, scope: Scope) -> Verdict:
        return self._decide(presented_key(scope["headers"], basic=True))

    def _decide(self, token: bytes | None) -> Verdict:
        if token is None:
            return _NO_KEY
        digest = hashlib.sha256(token).digest()
        admitted: Admitted | None = None
        for known, verdict in self._digests:  # no early exit: every key costs the same
            if hmac.compare_digest(digest, known):
                admitted = verdict
        return _INVALID if admitted is None else admitted  # unknown key: 401, as OpenAI


class _Callable(_Guard):
    """``authorize=``: the host app's own check, awaited if it is async."""

    def __init__(self, authorize: Authorize) -> None:
        self._authorize = authorize

    def verdict(self, scope: Scope) -> Verdict | Awaitable[Verdict]:
        try:
            verdict = self._authorize(scope, Headers(scope=scope))
        except Forbidden as refusal:
            return _forbidden(refusal)
        if inspect.isawaitable(verdict):
            return self._awaited(scope, verdict)
        return self._decide(scope, verdict)

    async def _awaited(self, scope: Scope, verdict: Awaitable[object]) -> Verdict:
        try:
            return self._decide(scope, await verdict)
        except Forbidden as refusal:
            return _forbidden(refusal)

    def _decide(self, scope: Scope, verdict: object) -> Verdict:
        if verdict is None or verdict is False:
            # Not a principal the host app knows: 401 whether credentials came or not.
            return _INVALID if _has_credentials(scope["headers"]) else _NO_CREDENTIALS
        return Admitted(None if verdict is True else verdict)


def chose_inbound_auth(settings: RouterSettings) -> bool:
    """Whether the settings chose ``authorize``, ``api_keys`` or ``allow_unauthenticated`` (with
    ``admin_keys``, virtual keys may be the inbound auth alone)."""
    return settings.authorize is not None or settings.api_keys is not None or settings.allow_unauthenticated


def build_guard(settings: RouterSettings) -> Guard:
    """The guard for these settings.

    Settings cannot be built without exactly one inbound auth option; settings made without
    validation (``model_construct``) are checked again here, as :class:`ConfigError`.
    """
    if settings.authorize is not None:
        if not callable(settings.authorize):
            raise ConfigError("authorize must be a callable (scope, headers) -> bool | principal")
        return _Callable(settings.authorize)
    if settings.api_keys is not None:
        return _Keys(settings.api_keys)
    if settings.allow_unauthenticated:
        return _Open()
    raise ConfigError(NO_INBOUND_AUTH)
