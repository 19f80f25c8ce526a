"""The one place that knows where a shared store's URL (``state_url``) carries a secret.

A Redis URL is a secret wherever it is shown: redis-py takes a password from the user part
(``redis://user:password@host``), from the query (``?password=``, the documented form for a
``unix://`` socket, and any other query key that names a credential), and a password written
without percent-encoding spills past where a URL parser expects it to end (an unencoded ``#``
starts a "fragment", an unencoded ``/`` or ``?`` ends the host part early). Everything that
shows the URL (the shared state's log lines, ``asgi-router check``, the settings' refusals) shows
:func:`mask_store_url`'s form, and the log scrubber removes every string
:func:`store_url_secrets` finds, so no form of the password reaches a log or a page.

The masking is deliberately generous: everything between ``://`` and the *last* ``@`` is
credentials (a password may hold an unencoded ``@``, ``/``, ``?`` or ``#``); only a user name
that plainly is one (before the first ``:``, with no separator and no ``@`` in it) is kept.
Everything after an unencoded ``#`` is masked, since redis-py would silently drop it and it is
most likely the rest of a password. Masking too much costs a less readable log line; masking too
little leaks.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import unquote

__all__ = ["MASK", "mask_store_url", "store_url_secrets"]

#: What replaces every secret part of the URL.
MASK: Final = "***"

#: Query keys whose values are credentials (redis-py passes unknown query keys on as options).
_CREDENTIAL_KEY: Final = re.compile(r"pass|auth|token|secret|key|credential", re.IGNORECASE)
_QUERY_PAIR: Final = re.compile(r"([?&;])([^=&;#?]*)=([^&;#]*)")
#: Characters that cannot be in a user name of a well-formed URL's user part. An unencoded ``@``
#: there means an earlier ``@`` already ended what a parser takes as the user part, so the text
#: before the ``:`` is no plain user name (``redis://TOKEN@:@host`` keeps nothing of ``TOKEN``).
_NOT_IN_USER: Final = frozenset("/?#[]@")
#: Where redis-py's parser would cut a password written without percent-encoding.
_CUTS: Final = re.compile(r"[#/?@]")


def _spans(url: str) -> list[tuple[int, int]]:
    """The ``[start, end)`` ranges of ``url`` that hold (or may hold) a secret, in order."""
    spans: list[tuple[int, int]] = []
    start = url.find("://")
    start = 0 if start < 0 else start + 3
    at = url.rfind("@", start)
    tail_start = start
    if at >= 0:
        credentials = url[start:at]
        user, colon, _ = credentials.partition(":")
        if colon and not _NOT_IN_USER.intersection(user):
            spans.append((start + len(user) + 1, at))  # keep ``user:``, mask the password
        else:
            spans.append((start, at))  # a lone token before ``@`` may well be a password
        tail_start = at + 1
    fragment = url.find("#", tail_start)
    end = len(url) if fragment < 0 else fragment
    for match in _QUERY_PAIR.finditer(url, tail_start, end):
        if _CREDENTIAL_KEY.search(match.group(2)):
            spans.append((match.start(3), match.end(3)))
    if fragment >= 0:
        spans.append((fragment + 1, len(url)))
    return [(a, b) for a, b in spans if b > a]


def mask_store_url(url: str) -> str:
    """``url`` with every part that may be a credential replaced by ``***``: the only form of a
    shared store's URL that the router ever logs or shows."""
    shown: list[str] = []
    last = 0
    for start, end in _spans(url):
        shown += [url[last:start], MASK]
        last = end
    shown.append(url[last:])
    return "".join(shown)


def store_url_secrets(url: str) -> list[str]:
    """Every string a log line could carry of ``url``'s secrets, for the scrubber: each masked
    part as written and percent-decoded, and the pieces redis-py's parser would cut it into (an
    error message quotes the piece it choked on)."""
    found: list[str] = []
    for start, end in _spans(url):
        raw = url[start:end]
        for text in (raw, unquote(raw)):
            found.append(text)
            found += [piece for piece in _CUTS.split(text) if piece]
    return list(dict.fromkeys(found))
