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

# Each shape starts with its literal prefix, so the regex engine skips ahead to it instead of
# trying every position of a long prompt; that a prefix does not start mid-word is checked on
# the few matches found.
_SHAPES: Final = (
    re.compile(r"sk-(?:proj-|ant-|ar-)?[A-Za-z0-9_-]{20,}"),
    re.compile(r"AKIA[0-9A-Z]{16}\b"),
    re.compile(r"ghp_[A-Za-z0-9]{36}\b"),
    re.compile(r"xox[bp]-[0-9A-Za-z-]{10,}"),
    re.compile(r"-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----[\s\S]*?-----END (?:[A-Z]+ )?PRIVATE KEY-----"),
    re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
)
#: The literal each shape starts with: a text with none of them is not scanned at all.
_PREFIXES: Final = ("sk-", "AKIA", "ghp_", "xox", "-----BEGIN", "eyJ")


def find_secrets(text: str) -> Iterator[tuple[int, int, str]]:
    """Each span of ``text`` shaped like a credential: ``(start, end, "[SECRET]")``."""
    for prefix, shape in zip(_PREFIXES, _SHAPES, strict=True):
        if prefix not in text:
            continue
        for match in shape.finditer(text):
            start = match.start()
            before = text[start - 1] if start else " "
            if prefix[0] == "-" or not (before.isalnum() or before == "_"):
                yield start, match.end(), SECRET_LABEL
