"""A virtual key: who it belongs to, what it may ask for, its caps, and whether it opens now.

A key belongs to a *caller* (the team or product that the caller caps and metrics already name):
a request with the key is that caller's, capped by the caller's caps and by the key's own
(``usd_per_day``, ``tokens_per_day``, ``rpm``, ``downgrade_to``, ``hard_limit``, as a
``callers.<name>`` table has them). ``groups`` lists the refs the key may ask for; a ref asked is
compared after alias resolution, so an alias of an allowed group is allowed, and where the router
takes the request from there (a rule's target, a caller's ``downgrade_to``) is the router's
choice, not the client's, and needs no listing. A key refused (revoked, disabled, expired) is a
401 ``invalid_api_key``, as an unknown key is: the client's code treats both as "fix your key".

The JSON an admin sees (:meth:`VirtualKey.as_json`) never holds the secret or its digest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

__all__ = ["VirtualKey", "allowed", "rfc3339"]


def rfc3339(seconds: float | None) -> str | None:
    """Unix seconds as RFC 3339 in UTC (``2026-01-31T12:00:00Z``)."""
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def allowed(groups: tuple[str, ...] | None, model: str, aliases: Mapping[str, str]) -> bool:
    """Whether a key with ``groups`` (``None``: every ref) may ask for ``model``, the ref as
    asked; an alias is resolved on both sides, so an alias of an allowed ref is allowed."""
    if groups is None or model in groups:
        return True
    target = aliases.get(model, model)
    return any(aliases.get(ref, ref) == target for ref in groups)


@dataclass(frozen=True, slots=True)
class VirtualKey:
    """One virtual key as kept (times in Unix seconds; see the module docstring)."""

    id: str
    caller: str
    digest: bytes
    prefix: str
    created_at: float
    name: str | None = None
    groups: tuple[str, ...] | None = None
    usd_per_day: float | None = None
    tokens_per_day: int | None = None
    rpm: int | None = None
    downgrade_to: str | None = None
    hard_limit: float | None = None
    expires_at: float | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    disabled: bool = False
    revoked: bool = False
    #: The secret a rotation replaced, still accepted until :attr:`previous_until` (its grace).
    previous_digest: bytes | None = None
    previous_until: float | None = None
    #: When the key last changed (wall seconds): how other processes find what changed.
    updated_at: float = 0.0

    def opens(self, digest: bytes, now: float) -> bool:
        """Whether the secret with ``digest`` admits a request at wall time ``now``: the key is
        neither disabled, revoked nor expired, and the secret is its own (or the one a rotation
        replaced, within its grace)."""
        if self.disabled or self.revoked or (self.expires_at is not None and now >= self.expires_at):
            return False
        return digest == self.digest or (
            digest == self.previous_digest and self.previous_until is not None and now < self.previous_until
        )

    @property
    def capped(self) -> bool:
        """Whether the key has caps of its own."""
        return self.usd_per_day is not None or self.tokens_per_day is not None or self.rpm is not None

    def allows(self, model: str, aliases: Mapping[str, str]) -> bool:
        """Whether the key may ask for ``model`` (see :func:`allowed`)."""
        return allowed(self.groups, model, aliases)

    def as_json(self) -> dict[str, object]:
        """The key as the admin API and page show it."""
        return {
            "id": self.id,
            "caller": self.caller,
            "name": self.name,
            "groups": list(self.groups) if self.groups is not None else None,
            "usd_per_day": self.usd_per_day,
            "tokens_per_day": self.tokens_per_day,
            "rpm": self.rpm,
            "downgrade_to": self.downgrade_to,
            "hard_limit": self.hard_limit,
            "expires_at": rfc3339(self.expires_at),
            "metadata": dict(self.metadata),
            "disabled": self.disabled,
            "revoked": self.revoked,
            "prefix": self.prefix,
            "created_at": rfc3339(self.created_at),
        }
