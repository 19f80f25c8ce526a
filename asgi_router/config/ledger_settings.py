"""Where keys and spend last: ``ledger_url``, parsed and checked when the settings are built.

Three kinds of ledger: ``sqlite:///path/file.db`` (a file on this host, shared by its workers;
three slashes and a relative path, or four and an absolute one), ``postgresql://user:password@host:5432/db``
(one database for a fleet; needs the ``postgres`` extra) and ``memory://`` (nothing lasts: tests).
A PostgreSQL URL carries a password, so a ledger URL is a secret: a refusal names only its kind
and what is wrong, and every log line and page shows it masked (``core/store_url.py``). A URL
that cannot be used is refused here rather than at the first connection.

When ``admin_keys`` is set and ``ledger_url`` is not, keys issued at runtime need somewhere to
live: the ledger is :data:`DEFAULT_LEDGER_URL`, a file in the working directory, unless the
environment variable :data:`DEFAULT_LEDGER_VARIABLE` names another. The test kit's pytest plugin
sets it to ``memory://`` for the test session, so that a user's test of an app with admin keys
never leaves the default ledger's file in the directory pytest ran in (nor reads one a previous
run left).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import urlsplit

from pydantic import SecretStr

__all__ = [
    "CAPS_WITHOUT_LEDGER",
    "DEFAULT_LEDGER_URL",
    "DEFAULT_LEDGER_VARIABLE",
    "LedgerKind",
    "LedgerTarget",
    "check_admin_keys_apart",
    "check_ledger_url",
    "effective_ledger_url",
    "ledger_target",
]

LedgerKind = Literal["sqlite", "postgresql", "memory"]

#: The ledger of a router with ``admin_keys`` and no ``ledger_url``: a file in the working directory.
DEFAULT_LEDGER_URL: Final = "sqlite:///asgi_router.sqlite3"
#: The environment variable that replaces :data:`DEFAULT_LEDGER_URL` (the test kit: ``memory://``).
DEFAULT_LEDGER_VARIABLE: Final = "ASGI_ROUTER_DEFAULT_LEDGER_URL"

#: Said at start and by ``asgi-router check`` when caps are set and no ledger keeps their tallies.
CAPS_WITHOUT_LEDGER: Final = (
    "callers/sessions caps count in memory without a ledger: every tally resets when the router restarts; "
    "set ledger_url (e.g. sqlite:///asgi_router.sqlite3) to keep them"
)

_SQLITE_PREFIX: Final = "sqlite:///"
_POSTGRES_SCHEMES: Final = frozenset({"postgresql", "postgres"})
_NO_ASYNCPG: Final = (
    "ledger_url: a PostgreSQL ledger needs the asyncpg package; install the extra: pip install 'asgi-router[postgres]'"
)


@dataclass(frozen=True, slots=True)
class LedgerTarget:
    """A ledger URL taken apart: its kind, and for SQLite the file's path (``:memory:`` for ``memory://``)."""

    kind: LedgerKind
    url: str
    #: The SQLite file (``None`` for PostgreSQL).
    path: str | None = None


def ledger_target(url: str) -> LedgerTarget:
    """``url`` taken apart, or :class:`ValueError` saying what is wrong without quoting it."""
    text = url.strip()
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if scheme == "memory":
        if text.lower() != "memory://":
            raise ValueError("ledger_url: memory:// takes nothing after it")
        return LedgerTarget("memory", text, ":memory:")
    if scheme == "sqlite":
        if not text.lower().startswith(_SQLITE_PREFIX):
            raise ValueError(
                "ledger_url: a sqlite URL is sqlite:///relative/path.db or sqlite:////absolute/path.db (no host)"
            )
        path = text[len(_SQLITE_PREFIX) :]
        if not path or path.endswith("/"):
            raise ValueError("ledger_url: a sqlite URL needs a file name after sqlite:///")
        if "?" in path or "#" in path or any(ord(c) < 32 for c in path):
            raise ValueError("ledger_url: a sqlite URL takes a plain path (no '?', '#' or control characters)")
        return LedgerTarget("sqlite", text, path)
    if scheme in _POSTGRES_SCHEMES:
        problem = _postgres_problem(text)
        if problem:
            raise ValueError(
                f"ledger_url: {problem}; if the password holds '@', '/', '?', '#' or ':', percent-encode it"
            )
        return LedgerTarget("postgresql", text)
    shown = scheme if scheme.isascii() and scheme.replace("+", "").isalnum() and len(scheme) <= 20 else "(not shown)"
    raise ValueError(
        f"ledger_url: scheme {shown or '(none)'!r} is not one the router knows; use sqlite:///path/file.db, "
        "postgresql://user:password@host:5432/db or memory://"
    )


def _postgres_problem(url: str) -> str | None:
    if "#" in url:
        return "it holds an unencoded '#'"
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        return "it holds spaces or control characters"
    parts = urlsplit(url)
    if "@" in parts.path or "@" in parts.query:
        return "its user part ends after the host (an unencoded '/' or '?' before an '@')"
    if not parts.netloc.rpartition("@")[2]:
        return "a postgresql:// URL needs a host"
    try:
        parts.port  # noqa: B018 -- urllib raises on a port that is not a number
    except ValueError:
        return "its port is not a number"
    return None


def check_ledger_url(value: SecretStr | None) -> SecretStr | None:
    """Refuse a ledger URL that cannot be used (see the module docstring), naming no secret."""
    if value is None:
        return None
    target = ledger_target(value.get_secret_value())
    if target.kind == "postgresql" and importlib.util.find_spec("asyncpg") is None:
        raise ValueError(_NO_ASYNCPG)
    return SecretStr(target.url)


def effective_ledger_url(ledger_url: SecretStr | None, admin_keys: list[SecretStr] | None) -> str | None:
    """The ledger a router uses: ``ledger_url``, else the default ledger when admin keys issue
    virtual keys (they must live somewhere: :data:`DEFAULT_LEDGER_URL`, or what
    :data:`DEFAULT_LEDGER_VARIABLE` names), else none."""
    if ledger_url is not None:
        return ledger_url.get_secret_value()
    if not admin_keys:
        return None
    chosen = os.environ.get(DEFAULT_LEDGER_VARIABLE)
    if not chosen:
        return DEFAULT_LEDGER_URL
    try:
        ledger_target(chosen)
    except ValueError as exc:
        raise ValueError(f"{DEFAULT_LEDGER_VARIABLE}: {exc}") from None
    return chosen


def check_admin_keys_apart(
    admin_keys: list[SecretStr] | None, api_keys: list[SecretStr] | dict[str, SecretStr] | None
) -> None:
    """Refuse a string that is both an admin key and an inbound key: the two never open each
    other's routes, which one string in both lists would defeat."""
    if not admin_keys or not api_keys:
        return
    inbound = api_keys.values() if isinstance(api_keys, dict) else api_keys
    inbound_secrets = {key.get_secret_value() for key in inbound}
    for number, key in enumerate(admin_keys, 1):
        if key.get_secret_value() in inbound_secrets:
            raise ValueError(
                f"admin_keys: key #{number} is also in api_keys; an admin key must not open chat routes "
                "(nor an inbound key the admin routes): use different keys"
            )
