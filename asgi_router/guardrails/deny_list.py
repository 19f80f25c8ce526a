"""Banned words and patterns: an operator's own list, compiled once when the router is built.

Terms match as whole words, case-insensitively ("Acme" finds "acme" but not "acmes"); patterns
are regular expressions, matched as written.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Final

__all__ = ["DENIED_LABEL", "DenyList"]

DENIED_LABEL: Final = "[DENIED]"


class DenyList:
    """Terms and patterns as one compiled alternation per list."""

    __slots__ = ("_patterns", "_terms")

    def __init__(self, terms: Sequence[str], patterns: Sequence[str]) -> None:
        words = "|".join(re.escape(term) for term in terms if term)
        self._terms = re.compile(rf"(?<!\w)(?:{words})(?!\w)", re.IGNORECASE) if words else None
        self._patterns = tuple(re.compile(pattern) for pattern in patterns)

    def find(self, text: str) -> Iterator[tuple[int, int, str]]:
        """Each denied span of ``text``: ``(start, end, "[DENIED]")``."""
        if self._terms is not None:
            for match in self._terms.finditer(text):
                yield match.start(), match.end(), DENIED_LABEL
        for pattern in self._patterns:
            for match in pattern.finditer(text):
                if match.end() > match.start():
                    yield match.start(), match.end(), DENIED_LABEL
