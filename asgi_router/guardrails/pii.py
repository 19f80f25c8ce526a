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

# Each pattern starts with a character class or a literal, never with a look-behind or ``\b``: so
# the regex engine skips ahead to where a match can start instead of trying every position (a
# 10 kB prompt is scanned several times faster). The edges a match must have (not inside a longer
# number or word) are checked on the few candidates found (``_EDGES``).
_PATTERNS: Final[dict[PiiEntity, tuple[re.Pattern[str], ...]]] = {
    # From the "@" (found by str.find, below) to the end of the domain; the local part is read
    # backwards from it.
    "email": (re.compile(r"@(?:[A-Za-z0-9-]{1,63}\.){1,8}[A-Za-z]{2,24}\b"),),
    # 13 to 19 digits, each separated from the next by at most one space or dash.
    "payment_card": (re.compile(r"\d(?:[ -]?\d){12,18}"),),
    "iban": (re.compile(r"[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b"),),
    "us_ssn": (re.compile(r"\d{3}-\d{2}-\d{4}"),),
    "ip_address": (re.compile(r"\d{1,3}(?:\.\d{1,3}){3}"),),
    # International (+country) or North American shapes; never a bare run of digits.
    "phone": (
        re.compile(r"\+\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]?\d{2,4}){2,4}"),
        re.compile(r"\(\d{3}\)[ .-]?\d{3}[ .-]\d{4}"),
        re.compile(r"\d{3}[.-]\d{3}[.-]\d{4}"),
    ),
}
# Where a number-shaped entity (card, SSN, IPv4 address, phone) can be: a run of at least seven
# digits and separators. Prose has few, so one scan for them replaces one scan per entity.
_NUMBERISH: Final = re.compile(r"[\d+(][\d .()+-]{6,}")
_NUMBERS: Final = frozenset(("payment_card", "us_ssn", "ip_address", "phone"))
# A full-form IPv6 address from its first ":" (a literal the engine skips ahead to); the group
# before it is read backwards.
_IPV6: Final = re.compile(r":(?:[0-9A-Fa-f]{1,4}:){6}[0-9A-Fa-f]{1,4}")
_HEX: Final = frozenset("0123456789abcdefABCDEF")
_LOCAL_PART: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-")
#: A character that may not touch a match on either side, per entity (a match inside a longer
#: number, word or address is not one).
_EDGES: Final[dict[PiiEntity, str]] = {
    "email": "",
    "payment_card": "0123456789-",
    "iban": "",
    "us_ssn": "0123456789-",
    "ip_address": "0123456789.:abcdefABCDEF",
    "phone": "0123456789+",
}
#: A literal every match contains: a text without it is not scanned at all.
_NEEDS: Final[dict[PiiEntity, str]] = {"us_ssn": "-"}


def _ssn(match: str) -> bool:
    area, group, serial = match.split("-")
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def _ip(match: str) -> bool:
    if ":" in match:
        return True
    return all(len(octet) == 1 or (octet[0] != "0" and int(octet) <= 255) for octet in match.split("."))


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


_CHECKSUMS: Final[dict[PiiEntity, Callable[[str], bool]]] = {
    "payment_card": _card,
    "iban": iban_valid,
    "us_ssn": _ssn,
    "ip_address": _ip,
}


def _alone(text: str, start: int, end: int, edges: str) -> bool:
    """Whether the match ``text[start:end]`` touches no word character (nor one of ``edges``)."""
    before = text[start - 1] if start else " "
    after = text[end] if end < len(text) else " "
    if after == "." and end + 1 < len(text) and text[end + 1].isalnum():  # 1.2.3.4.5, a.b@c.d.e
        return False
    return not (
        before.isalnum() or before == "_" or before in edges or after.isalnum() or after == "_" or after in edges
    )


def _emails(text: str) -> Iterator[tuple[int, int, str]]:
    """Each address: from each "@", its domain forwards and its local part backwards."""
    domain = _PATTERNS["email"][0]
    at = text.find("@")
    while at >= 0:
        start = at
        while start > 0 and at - start < 64 and text[start - 1] in _LOCAL_PART:
            start -= 1
        found = domain.match(text, at) if start < at else None
        if found is not None:
            yield start, found.end(), LABELS["email"]
        at = text.find("@", found.end() if found is not None else at + 1)


def _ipv6(text: str) -> Iterator[tuple[int, int, str]]:
    for match in _IPV6.finditer(text):
        start, end = match.span()
        first = start
        while first > 0 and start - first < 4 and text[first - 1] in _HEX:
            first -= 1
        if first < start and _alone(text, first, end, ":" + "".join(_HEX)):
            yield first, end, LABELS["ip_address"]


def find_pii(text: str, entities: Iterable[PiiEntity]) -> Iterator[tuple[int, int, str]]:
    """Each span of ``text`` that is one of ``entities``: ``(start, end, label)``."""
    regions: list[tuple[int, int]] | None = None
    for entity in entities:
        if entity == "email":
            yield from _emails(text)
            continue
        if entity == "ip_address" and ":" in text:
            yield from _ipv6(text)
        needs = _NEEDS.get(entity)
        if needs is not None and needs not in text:
            continue
        if entity in _NUMBERS:
            if regions is None:
                regions = [match.span() for match in _NUMBERISH.finditer(text)]
            spans = regions
        else:
            spans = [(0, len(text))]
        checksum, edges = _CHECKSUMS.get(entity), _EDGES[entity]
        for pattern in _PATTERNS[entity]:
            for low, high in spans:
                for match in pattern.finditer(text, low, high):
                    start, end = match.span()
                    if _alone(text, start, end, edges) and (checksum is None or checksum(match.group())):
                        yield start, end, LABELS[entity]
