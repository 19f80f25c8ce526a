"""A request's session id (the ``session_header``): bounded, and kept only as a digest.

Sessions are the client's own words: a caller may send any value, any length. Where the router
reads it (session caps, a session-keyed sticky group) a value over :data:`MAX_SESSION_ID_BYTES`
is refused with a 400 before anything is kept for it, and what is kept is a SHA-256 digest of the
caller and the session, never the text: the same digest in every process and after a restart, so
a fleet's processes and a restarted router count one session as one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Final

from asgi_router.config.settings import RouterSettings
from asgi_router.core.router_errors import RouterError

__all__ = ["MAX_SESSION_ID_BYTES", "read_session_header", "session_digest", "session_refusal", "session_value"]

#: The longest session id accepted: room for any UUID, ULID or signed token a client invents.
MAX_SESSION_ID_BYTES: Final = 256


def read_session_header(settings: RouterSettings) -> bytes | None:
    """The ``session_header`` when the router reads it (session caps, a session-keyed sticky
    group), else ``None``: then a request's session id is never looked at."""
    sticky = any(group.sticky is not None and group.sticky.key == "session" for group in settings.groups.values())
    return settings.session_header.encode("latin-1") if settings.sessions is not None or sticky else None


def session_value(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The request's ``name`` header (lower case), stripped; ``None`` when absent or blank."""
    for key, value in headers:
        if key == name:
            return value.strip() or None
    return None


def session_refusal(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> RouterError | None:
    """The 400 for a session id over :data:`MAX_SESSION_ID_BYTES`, naming the header; else ``None``."""
    for key, value in headers:
        if key == name and len(value.strip()) > MAX_SESSION_ID_BYTES:
            return RouterError(
                400,
                "invalid_session_id",
                f"the {name.decode('latin-1')} header is over {MAX_SESSION_ID_BYTES} bytes",
            )
    return None


def session_digest(caller: str, session: bytes) -> str:
    """The session as kept: SHA-256 (hex) of the caller, a NUL, and the session id."""
    return hashlib.sha256(caller.encode("utf-8", "surrogatepass") + b"\x00" + session).hexdigest()
