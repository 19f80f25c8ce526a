"""Caps per caller and per session: ``[callers.<name>]``, ``[callers."*"]`` and ``[sessions]``.

A *caller* is the request's principal (an ``api_keys`` name, ``key-<8 hex>`` for list-form keys,
the text of what ``authorize=`` returned, ``anonymous`` when there is none); a *session* is the
value of the ``session_header`` a caller sends. Each table caps spend (USD from the catalog's
prices), tokens and (for callers) requests per minute; past a cap a request is served from
``downgrade_to`` instead, or refused when there is none, and ``hard_limit`` says where even the
downgrade stops. What only the whole configuration can check (a ``downgrade_to`` naming an
unknown ref, a caller table naming no configured key) is checked by :func:`check_callers`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Final, Self

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from asgi_router.config.strict_settings import StrictSettings
from asgi_router.core.refs import InvalidRef, RefKind, parse_model_ref

__all__ = [
    "ANY_CALLER",
    "CALLER_NAME",
    "CallerCaps",
    "SessionCaps",
    "check_callers",
    "check_session_header",
]

#: The table every caller without a table of its own is capped by (each counted alone).
ANY_CALLER: Final = "*"
#: What a caller table's name may be: a principal as events show it.
CALLER_NAME: Final = re.compile(r"[A-Za-z0-9_.:@\-]{1,64}")
# A header name (RFC 9110 token), lowercase as ASGI gives it.
_HEADER_NAME: Final = re.compile(r"[a-z0-9!#$%&'*+.^_`|~\-]{1,64}")

_HARD_LIMIT = (
    "With `downgrade_to`: refuse once usage reaches this multiple of the cap (e.g. `2.0`); unset: the "
    "downgrade serves without end. Without `downgrade_to` the cap itself refuses."
)
_DOWNGRADE = (
    'Past a cap, serve from this ref instead (`"group/<id>"`, `"provider/model-id"` or an alias), with its own '
    "plan, strategy and failover, and the router's limit header naming the cap; unset: refuse with a 429."
)


class CallerCaps(StrictSettings):
    """One caller's caps (or every unnamed caller's, as ``callers."*"``). At least one cap is set."""

    usd_per_day: PositiveFloat | None = Field(
        default=None,
        description="USD a caller may spend per UTC day: the catalog's prices times the upstream's usage "
        "(estimated where a response reports none). A model without prices costs nothing here.",
    )
    tokens_per_day: PositiveInt | None = Field(
        default=None, description="Prompt plus completion tokens a caller may use per UTC day."
    )
    rpm: PositiveInt | None = Field(
        default=None, description="Requests a caller may start in a rolling 60 s window, like a member's `rpm`."
    )
    downgrade_to: str | None = Field(default=None, description=_DOWNGRADE)
    hard_limit: float | None = Field(default=None, ge=1.0, description=_HARD_LIMIT)

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.usd_per_day is None and self.tokens_per_day is None and self.rpm is None:
            raise ValueError("sets no cap: give it usd_per_day, tokens_per_day or rpm (or remove the table)")
        if self.hard_limit is not None and self.downgrade_to is None:
            raise ValueError("hard_limit needs downgrade_to (without it the cap itself refuses)")
        return self


class SessionCaps(StrictSettings):
    """Caps per (caller, session) for requests carrying ``session_header``. At least one cap is set."""

    usd_per_session: PositiveFloat | None = Field(
        default=None, description="USD one session may spend (priced as `usd_per_day`)."
    )
    tokens_per_session: PositiveInt | None = Field(
        default=None, description="Prompt plus completion tokens one session may use."
    )
    ttl: PositiveFloat = Field(
        default=86_400.0,
        description="Seconds a session's tally is kept after its last request; a session quiet that long "
        "starts again from nothing.",
    )
    downgrade_to: str | None = Field(default=None, description=_DOWNGRADE)
    hard_limit: float | None = Field(default=None, ge=1.0, description=_HARD_LIMIT)

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.usd_per_session is None and self.tokens_per_session is None:
            raise ValueError("sets no cap: give it usd_per_session or tokens_per_session (or remove the table)")
        if self.hard_limit is not None and self.downgrade_to is None:
            raise ValueError("hard_limit needs downgrade_to (without it the cap itself refuses)")
        return self


def check_session_header(value: str) -> str:
    """The header name, lowercase (how ASGI hands headers over)."""
    lowered = value.strip().lower()
    if not _HEADER_NAME.fullmatch(lowered):
        raise ValueError(f"session_header {value!r} is not a header name")
    return lowered


def check_callers(
    callers: Mapping[str, CallerCaps],
    sessions: SessionCaps | None,
    key_names: frozenset[str] | None,
    aliases: Mapping[str, object],
    providers: Mapping[str, object],
    groups: Mapping[str, object],
) -> None:
    """Refuse a caller table with a name no principal can have and a ``downgrade_to`` naming no
    configured alias, group or provider; warn (a typo?) about a ``callers.<name>`` that
    names no key of a mapping ``api_keys`` (``key_names``; ``None`` when keys are not named)."""
    for name, caps in callers.items():
        if name != ANY_CALLER and not CALLER_NAME.fullmatch(name):
            raise ValueError(f"callers.{name}: a caller is a principal's name: letters, digits, '_.:@-', 1 to 64")
        if caps.downgrade_to is not None:
            _check_ref(f"callers.{name}.downgrade_to", caps.downgrade_to, aliases, providers, groups)
        if key_names is not None and name != ANY_CALLER and name not in key_names:
            logging.getLogger("asgi_router").warning(
                "callers.%s names no key of api_keys (%s): its caps apply to no one; a typo?",
                name,
                ", ".join(sorted(key_names)),
            )
    if sessions is not None and sessions.downgrade_to is not None:
        _check_ref("sessions.downgrade_to", sessions.downgrade_to, aliases, providers, groups)


def _check_ref(
    key: str, target: str, aliases: Mapping[str, object], providers: Mapping[str, object], groups: Mapping[str, object]
) -> None:
    ref = parse_model_ref(target)
    if isinstance(ref, InvalidRef):
        raise ValueError(f"{key}: {target!r} is not a valid reference ({ref.message})")
    if ref.kind is RefKind.ALIAS and target not in aliases:
        raise ValueError(f"{key}: {target!r} names no alias, group or provider model")
    if ref.kind is RefKind.DIRECT and ref.name not in providers:
        raise ValueError(f"{key}: {target!r} names unknown provider {ref.name!r}")
    if ref.kind is RefKind.GROUP and ref.name not in groups:
        raise ValueError(f"{key}: {target!r} names unknown group {ref.name!r}")
