"""Who may open the admin routes: admin keys alone, and a lock against guessing them.

Admin keys and inbound keys are kept apart both ways: an admin key never opens a chat route (it
is no inbound key: settings refuse a string in both lists) and no inbound key, configured or
virtual, opens an admin route; only the keys of ``admin_keys`` do, presented as
``Authorization: Bearer`` or ``x-api-key`` (a header: never a cookie, so no other site's page
can make a browser send it). They are compared as inbound keys are: both sides hashed, every
key compared, no early exit.

A client address that failed 10 times within 60 s gets 429 for 60 s on every admin route, the
right key included: guessing stays hopeless however fast the client. The table of addresses is
bounded (the oldest forgotten first).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from typing import Final

from pydantic import SecretStr
from starlette.types import Scope

from asgi_router.core.router_errors import RouterError
from asgi_router.inbound.auth import presented_key

__all__ = ["AdminDoor"]

#: Failed authentications from one address within :data:`WINDOW` seconds that lock it out.
MOST_FAILURES: Final = 10
WINDOW: Final = 60.0
#: How long a locked-out address is refused.
LOCKOUT: Final = 60.0
_MOST_ADDRESSES: Final = 10_000

_CHALLENGE: Final = ((b"www-authenticate", b"Bearer"),)
_WRONG: Final = RouterError(401, "invalid_api_key", "an admin key is needed here", headers=_CHALLENGE)


class AdminDoor:
    """Admin keys checked, failures counted per client address (see the module docstring)."""

    def __init__(self, keys: Sequence[SecretStr], clock: Callable[[], float] = time.monotonic) -> None:
        self._digests = tuple(hashlib.sha256(key.get_secret_value().encode()).digest() for key in keys)
        self._clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._locked: dict[str, float] = {}

    def refusal(self, scope: Scope) -> RouterError | None:
        """``None`` when the request carries an admin key and its address is not locked out."""
        address = _address(scope)
        now = self._clock()
        until = self._locked.get(address)
        if until is not None:
            if now < until:
                return _locked(until - now)
            del self._locked[address]
        token = presented_key(scope["headers"])
        if token is not None:
            digest = hashlib.sha256(token).digest()
            found = False
            for known in self._digests:  # no early exit: every key costs the same
                found |= hmac.compare_digest(digest, known)
            if found:
                return None
        return self._failed(address, now)

    def _failed(self, address: str, now: float) -> RouterError:
        failures = self._failures.get(address)
        if failures is None:
            failures = self._failures[address] = deque()
            if len(self._failures) > _MOST_ADDRESSES:
                self._failures.popitem(last=False)
        while failures and failures[0] <= now - WINDOW:
            failures.popleft()
        failures.append(now)
        if len(failures) >= MOST_FAILURES:
            del self._failures[address]
            self._locked[address] = now + LOCKOUT
            if len(self._locked) > _MOST_ADDRESSES:
                self._locked.pop(next(iter(self._locked)))
        return _WRONG


def _address(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "-"


def _locked(seconds: float) -> RouterError:
    return RouterError(
        429,
        "too_many_failed_logins",
        "too many failed admin authentications from this address; try again later",
        retry_after=seconds,
    )
