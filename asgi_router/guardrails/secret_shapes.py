"""Credentials found by their published shapes: API keys, tokens, private keys, JWTs.

Each shape is a vendor's documented prefix and length (OpenAI's and Anthropic's ``sk-``, AWS's
``AKIA``, GitHub's ``ghp_``, Slack's ``xoxb-``/``xoxp-``), a PEM private-key block, or a JWT's
three base64url parts; a plain word ("task-based") never matches, a key-shaped string does
wherever it is, a code block included.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

__all__ = ["SECRET_LABEL", "find_secrets"]

SECRET_LABEL: Final = "[SECRET]"

_SHAPES: Final = re.compile(
    r"\bsk-(?:proj-|ant-|ar-)?[A-Za-z0-9_-]{20,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
    r"|\bghp_[A-Za-z0-9]{36}\b"
    r"|\bxox[bp]-[0-9A-Za-z-]{10,}"
    r"|-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----[\s\S]*?-----END (?:[A-Z]+ )?PRIVATE KEY-----"
    r"|\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
)


def find_secrets(text: str) -> Iterator[tuple[int, int, str]]:
    """Each span of ``text`` shaped like a credential: ``(start, end, "[SECRET]")``."""
    for match in _SHAPES.finditer(text):
        yield match.start(), match.end(), SECRET_LABEL
