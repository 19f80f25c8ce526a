"""The Responses API's stored responses: how many ids the router remembers, and for how long.

A follow-up turn names its previous response (``previous_response_id``), which only the provider
that produced it holds; the router remembers which candidate and which caller produced each
response id it relayed (``attempts/response_affinity.py`` acts on it), in this process (at most
``responses_max`` ids, the least recently used forgotten) or, with ``state_url``, in the fleet's
store for ``responses_ttl`` seconds (OpenAI keeps a stored response 30 days).
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import Field, PositiveFloat, PositiveInt

__all__ = ["RESPONSES_MAX", "RESPONSES_TTL", "ResponsesMax", "ResponsesTtl"]

RESPONSES_MAX: Final = 100_000
RESPONSES_TTL: Final = 30 * 86_400.0

ResponsesMax = Annotated[
    PositiveInt,
    Field(
        description="Response ids (`resp_...`) of the Responses API each process remembers, with the candidate and "
        "caller that produced them, so that a follow-up with `previous_response_id` goes back to that provider; the "
        "least recently used is forgotten past it (see [Protocols](protocols.md))."
    ),
]
ResponsesTtl = Annotated[
    PositiveFloat,
    Field(
        description="Seconds a fleet's store (`state_url`) keeps which candidate produced a response id (default 30 "
        "days, as OpenAI keeps stored responses)."
    ),
]
