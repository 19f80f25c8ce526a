"""Which token counts an upstream's ``usage`` may state: the one check every reader of usage makes.

An upstream's ``usage`` is input the router does not control. One absurd figure (an integer of
hundreds of digits, a negative count, ``true``) must not reach a Prometheus counter (which turns
it into a float and fails every later scrape), a budget (which it would exhaust for good) or a
cost. So every place that reads a count out of ``usage`` (the token count of a served response,
the translation of Anthropic's usage into OpenAI's, the metrics, budgets, caller caps, resumed
streams) asks :func:`plausible_tokens` first and treats ``None`` as "not stated": the response
is then counted by estimate, as one without ``usage`` is.
"""

from __future__ import annotations

from typing import Final

__all__ = ["MAX_PLAUSIBLE_TOKENS", "plausible_tokens"]

#: The largest token count one response may state and be believed: far above any model's
#: context window and output, far below where a float or a budget breaks.
MAX_PLAUSIBLE_TOKENS: Final = 100_000_000


def plausible_tokens(value: object) -> int | None:
    """``value`` as a token count, or ``None`` when it cannot be one: not an integer (a float, a
    string, ``True``/``False``), negative, or above :data:`MAX_PLAUSIBLE_TOKENS`."""
    if type(value) is not int or not 0 <= value <= MAX_PLAUSIBLE_TOKENS:
        return None
    return value
