"""Where the router keeps its state: in this process, or shared by a fleet through Redis.

``state_url`` names the store. Absent or ``memory://``: every process keeps its own breakers,
rotation counters and budgets. ``redis://``, ``rediss://`` (TLS), ``unix://`` (a socket) or
``redis+sentinel://`` (a Sentinel-watched primary): every process that names the same store
and key prefix shares them (``asgi_router.fleet``). The URL may carry an ACL user and
password, so it is a secret: it is never echoed, and a refusal names only its scheme and what is
wrong with it. A URL redis-py cannot parse (a password with an unencoded ``#``, ``/`` or ``?``
is the usual cause) is refused here, when the settings are built, rather than failing at the
first connection.
"""

from __future__ import annotations

import importlib.util
import re
from typing import Final
from urllib.parse import parse_qsl, urlsplit

from pydantic import SecretStr

__all__ = ["MEMORY", "REDIS_SCHEMES", "check_key_prefix", "check_state_url", "shared_store_url"]

MEMORY: Final = "memory"
#: The schemes that share state through Redis.
REDIS_SCHEMES: Final = frozenset({"redis", "rediss", "unix", "redis+sentinel"})

_ENCODE: Final = "; if the password holds '#', '/', '?', '@' or ':', percent-encode it (e.g. '#' is %23, '/' is %2F)"
_NO_REDIS: Final = (
    "state_url: sharing state through Redis needs the redis package (redis-py); install the extra: "
    "pip install 'asgi-router[redis]'"
)


def _scheme(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


#: What a scheme may look like to be quoted back (RFC 3986's shape, and short: every known one
#: is). Anything else before ``://`` is most likely a user part written without a scheme, which
#: may hold a password (``user:secret@host://...``), so a refusal never quotes it.
_SHOWN_SCHEME: Final = re.compile(r"[a-z][a-z0-9+.-]{0,19}")


def _shown_scheme(scheme: str) -> str:
    if not scheme:
        return "(none)"
    return scheme if _SHOWN_SCHEME.fullmatch(scheme) else "(not a URL scheme)"


def check_state_url(value: SecretStr | None) -> SecretStr | None:
    """Refuse an unknown scheme, or a Redis store without the redis package, naming no secret."""
    if value is None:
        return None
    url = value.get_secret_value().strip()
    scheme = _scheme(url)
    if scheme == MEMORY:
        return None
    if scheme not in REDIS_SCHEMES:
        raise ValueError(
            f"state_url: scheme {_shown_scheme(scheme)!r} is not one the router knows; use memory:// (this process), "
            "redis://, rediss://, unix:// or redis+sentinel://"
        )
    if scheme != "unix" and not urlsplit(url).netloc.rpartition("@")[2]:
        raise ValueError(f"state_url: a {scheme}:// URL needs a host{_ENCODE}")
    if importlib.util.find_spec("redis") is None:
        raise ValueError(_NO_REDIS)
    problem = _unparsable(url, scheme)
    if problem:
        raise ValueError(f"state_url: {problem}{_ENCODE}")
    return SecretStr(url)


def _unparsable(url: str, scheme: str) -> str | None:
    """What keeps redis-py (or the router, for ``redis+sentinel://``) from connecting to ``url``
    as meant, said without quoting any of it; ``None`` when it parses."""
    if "#" in url:
        return "it holds an unencoded '#' (everything after it would be dropped)"
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        return "it holds spaces or control characters"
    parts = urlsplit(url)
    host_part = parts.netloc.rpartition("@")[2]
    if "@" in parts.path or "@" in parts.query.partition("&")[0].partition("=")[0]:
        return "its user part ends after the host (an unencoded '/' or '?' before an '@')"
    if scheme == "redis+sentinel":
        return _sentinel_problem(host_part, parts.path, parts.query)
    try:
        parts.port  # noqa: B018 -- urllib raises on a port that is not a number
    except ValueError:
        return "its port is not a number"
    if scheme == "unix" and not parts.path:
        return "a unix:// URL needs the socket's path"
    for name, value in parse_qsl(parts.query):
        if name in _NUMBERS and not _is_number(value):
            return f"its query option {name!r} is not a number"
    return None


#: The query options redis-py reads as numbers (it refuses the URL when one is not).
_NUMBERS: Final = frozenset(
    {"db", "socket_timeout", "socket_connect_timeout", "health_check_interval", "max_connections"}
)


def _is_number(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def _sentinel_problem(hosts: str, path: str, query: str) -> str | None:
    for address in hosts.split(","):
        host, colon, port = address.rpartition(":") if ":" in address else (address, "", "")
        if not host or (colon and not port.isdigit()):
            return "redis+sentinel:// needs host:port pairs separated by commas"
    segments = [segment for segment in path.split("/") if segment]
    if not segments or len(segments) > 2:
        return "redis+sentinel:// needs the primary's name as its path (and optionally /db)"
    db = segments[1] if len(segments) > 1 else dict(parse_qsl(query)).get("db", "0")
    if not db.isdigit():
        return "redis+sentinel://'s database is not a number"
    return None


def check_key_prefix(value: str) -> str:
    """A prefix is one Redis key segment: printable, no spaces, no ``:`` (the separator)."""
    if not value or not value.isprintable() or any(c.isspace() or c == ":" for c in value):
        raise ValueError("state_key_prefix: letters, digits and punctuation other than ':', no spaces")
    return value


def shared_store_url(value: SecretStr | None) -> str | None:
    """The Redis URL to share state through, or ``None`` for in-process state."""
    return None if value is None else value.get_secret_value()
