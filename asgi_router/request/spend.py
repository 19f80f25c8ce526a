"""What a served response used: its tokens and their cost, kept on the request for its record.

The bookkeeper counts them (``attempts/bookkeeping.py``) and the answer phase keeps them on the
request (``request_state.py``); the record and the caller caps read them when the request ends.
Both are named tuples: one of each per served response.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Spend", "TokenCount"]


class TokenCount(NamedTuple):
    """Tokens one response used; ``measured`` when they came from the upstream's ``usage``.

    ``prompt`` counts every prompt token, those the provider read from its prompt cache
    (``cache_read``) and wrote to it (``cache_write``) among them, whichever way its usage
    counted them (OpenAI's ``prompt_tokens`` includes cached ones; Anthropic's ``input_tokens``
    does not)."""

    prompt: int
    completion: int
    measured: bool
    cache_read: int = 0
    cache_write: int = 0

    @property
    def total(self) -> int:
        return self.prompt + self.completion


class Spend(NamedTuple):
    """What a served response used (for the request record and the served event)."""

    tokens: TokenCount | None
    cost_usd: float | None
