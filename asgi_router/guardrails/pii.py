"""Personal data found by its shape, and by its checksum where one exists.

Each entity is a pattern; a payment card must also pass the Luhn check and an IBAN the ISO 13616
mod-97 check, so a random 16-digit number is not a card and a mistyped IBAN is not an IBAN.
Patterns are not understanding: names and postal addresses have no shape, and are not found.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import Final

from asgi_router.config.guardrail_settings import PiiEntity

__all__ = ["LABELS", "find_pii", "iban_valid", "luhn_valid"]

#: The label a masked span of each entity becomes.
LABELS: Final[dict[PiiEntity, str]] = {
    "email": "[EMAIL]",
    "phone": "[PHONE]",
    "payment_card": "[PAYMENT_CARD]",
    "iban": "[IBAN]",
    "us_ssn": "[US_SSN]",
    "ip_address": "[IP_ADDRESS]",
}

_PATTERNS: Final[dict[PiiEntity, re.Pattern[str]]] = {
    "email": re.compile(r"\b[A-Za-z0-9._%+-]{1,64}@(?:[A-Za-z0-9-]{1,63}\.){1,8}[A-Za-z]{2,24}\b"),
    # 13 to 19 digits, in groups of up to 4 separated by one space or dash.
    "payment_card": re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])"),
    "iban": re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b"),
    "us_ssn": re.compile(r"\b(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}\b"),
    "ip_address": re.compile(
        r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?!\.?\w)"
        r"|(?<![:\w])(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}(?![:\w])"
    ),
    # International (+country) or North American shapes; never a bare run of digits.
    "phone": re.compile(
        r"(?<![\w+])(?:\+\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]?\d{2,4}){2,4}"
        r"|\(\d{3}\)[ .-]?\d{3}[ .-]\d{4}|\d{3}[.-]\d{3}[.-]\d{4})(?!\w)"
    ),
}


def luhn_valid(digits: str) -> bool:
    """The Luhn checksum of a card number's digits (ISO/IEC 7812)."""
    total = 0
    for at, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if at % 2:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def iban_valid(text: str) -> bool:
    """The ISO 13616 mod-97 check of an IBAN (spaces ignored)."""
    compact = text.replace(" ", "")
    if not 15 <= len(compact) <= 34:
        return False
    moved = compact[4:] + compact[:4]
    number = "".join(str(int(char, 36)) for char in moved)
    return int(number) % 97 == 1


def _card(match: str) -> bool:
    digits = match.replace(" ", "").replace("-", "")
    return 13 <= len(digits) <= 19 and luhn_valid(digits)


_CHECKSUMS: Final[dict[PiiEntity, Callable[[str], bool]]] = {"payment_card": _card, "iban": iban_valid}


def find_pii(text: str, entities: Iterable[PiiEntity]) -> Iterator[tuple[int, int, str]]:
    """Each span of ``text`` that is one of ``entities``: ``(start, end, label)``."""
    for entity in entities:
        checksum = _CHECKSUMS.get(entity)
        for match in _PATTERNS[entity].finditer(text):
            if checksum is None or checksum(match.group()):
                yield match.start(), match.end(), LABELS[entity]
