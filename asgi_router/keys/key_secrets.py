"""A virtual key's secret: made once, shown once, kept only as its SHA-256.

The secret is ``sk-ar-`` and 43 URL-safe characters from :mod:`secrets` (256 random bits). With
that much entropy a fast hash is enough: nobody can search 2**256 candidates, however fast each
is, and a slow hash (bcrypt, scrypt) would put tens of milliseconds on every request. The
database therefore holds the digest, never the secret: a copy of it opens no door. Listings show
a form a person can tell keys apart by, and nothing that helps a guess (:func:`shown_prefix`).
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Final

__all__ = ["SECRET_PREFIX", "is_virtual", "key_digest", "new_key_id", "new_secret", "shown_prefix"]

#: What every virtual key's secret starts with (and how the router tells one from a config key).
SECRET_PREFIX: Final = "sk-ar-"
_PREFIX_BYTES: Final = SECRET_PREFIX.encode()
#: Random bytes in a secret: 32 bytes are 43 URL-safe characters.
_SECRET_BYTES: Final = 32


def new_secret() -> str:
    """A fresh secret: ``sk-ar-`` and 43 URL-safe random characters."""
    return SECRET_PREFIX + secrets.token_urlsafe(_SECRET_BYTES)


def new_key_id() -> str:
    """A key's id: public, stable, never a secret (``vk_`` and 16 hex digits)."""
    return "vk_" + secrets.token_hex(8)


def key_digest(secret: bytes) -> bytes:
    """The one form a secret is kept in."""
    return hashlib.sha256(secret).digest()


def is_virtual(token: bytes) -> bool:
    """Whether a presented key has a virtual key's form (a config key may not start so)."""
    return token.startswith(_PREFIX_BYTES)


def shown_prefix(secret: str) -> str:
    """What listings show: ``sk-ar-`` and the next 6 characters, and the last 4."""
    body = secret[len(SECRET_PREFIX) :]
    return f"{SECRET_PREFIX}{body[:6]}...{body[-4:]}"
