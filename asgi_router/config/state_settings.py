"""Where the router keeps its state: in this process, or shared by a fleet through Redis.

``state_url`` names the store. Absent or ``memory://``: every process keeps its own breakers,
rotation counters and budgets. ``redis://``, ``rediss://`` (TLS), ``unix://`` (a socket) or
``redis+sentinel://`` (a Sentinel-watched primary): every process that names the same store
and key prefix shares them (``asgi_router.fleet``). The URL may carry an ACL user and
password, so it is a secret: it is never echoed, and a refusal names only its scheme.
"""

from __future__ import annotations

import importlib.util
from typing import Final
from urllib.parse import urlsplit

from pydantic import SecretStr

__all__ = ["MEMORY", "REDIS_SCHEMES", "check_key_prefix", "check_state_url", "shared_store_url"]

MEMORY: Final = "memory"
#: The schemes that share state through Redis.
REDIS_SCHEMES: Final = frozenset({"redis", "rediss", "unix", "redis+sentinel"})

_NO_REDIS: Final = (
    "state_url: sharing state through Redis needs the redis package (redis-py); install the extra: "
    "pip install 'asgi-router[redis]'"
)


def _scheme(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def check_state_url(value: SecretStr | None) -> SecretStr | None:
    """Refuse an unknown scheme, or a Redis store without the redis package, naming no secret."""
    if value is None:
        return None
    url = value.get_secret_value().strip()
    scheme = _scheme(url)
    if scheme == MEMORY:
        return None
    if scheme not in REDIS_SCHEMES:
        shown = scheme or "(none)"
        raise ValueError(
            f"state_url: scheme {shown!r} is not one the router knows; use memory:// (this process), "
            "redis://, rediss://, unix:// or redis+sentinel://"
        )
    if scheme != "unix" and not urlsplit(url).netloc.rpartition("@")[2]:
        raise ValueError(f"state_url: a {scheme}:// URL needs a host")
    if importlib.util.find_spec("redis") is None:
        raise ValueError(_NO_REDIS)
    return SecretStr(url)


def check_key_prefix(value: str) -> str:
    """A prefix is one Redis key segment: printable, no spaces, no ``:`` (the separator)."""
    if not value or not value.isprintable() or any(c.isspace() or c == ":" for c in value):
        raise ValueError("state_key_prefix: letters, digits and punctuation other than ':', no spaces")
    return value


def shared_store_url(value: SecretStr | None) -> str | None:
    """The Redis URL to share state through, or ``None`` for in-process state."""
    return None if value is None else value.get_secret_value()
