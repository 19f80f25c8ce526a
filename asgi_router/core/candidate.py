"""One concrete upstream to try: a configured provider and that provider's model id.

Plans (:mod:`asgi_router.routing.plan`) are ordered tuples of these; the gate, the statistics,
events and the router's model header all name a candidate by its ``provider/model-id`` key.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Candidate"]


@dataclass(frozen=True, slots=True)
class Candidate:
    """One concrete upstream to try: a configured provider and that provider's model id."""

    provider: str
    model_id: str
    #: ``provider/model-id``, built once: the request path names a candidate half a dozen times
    #: (gate and statistics keys, events, the router's model header).
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.provider}/{self.model_id}")

    def __str__(self) -> str:
        return self.key
