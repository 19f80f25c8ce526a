"""Resolve a :class:`ModelRef` to a :class:`Plan`: the ordered candidates to try.

Resolution sits on every request's path, so it does no I/O, takes no locks and, for ``order``
groups, allocates nothing: plans are built once from the settings and handed out as they are.
``rotate`` precomputes every rotation and picks one with a counter advanced once per request;
the counter lives in the router's :class:`~asgi_router.resilience.state.RouterState` (synchronous, never
awaits), so that a shared store can later make rotation span workers.

A plan also says how often each candidate may be retried in place (``retries``): a plan of one
candidate gets ``RouterSettings.retries``, a longer one fails over instead unless its group
sets ``retries``.

A strategy only *orders* candidates; every strategy plugs into :data:`_STRATEGIES` as a factory
from a group's table to a picker. ``weighted``, ``least_busy``, ``latency``, ``cost`` and
``usage`` live in ``strategies.py`` and read :class:`~asgi_router.resilience.stats.RoutingStats`; a group with
``rules = true`` first runs ``[[rules]]`` (``rules.py``), and the plan records which rule chose it.
Resolution re-checks what config validation already refused (defence in depth): a ref that
names something unknown yields a :class:`ResolveError`, never an exception from a dict lookup.
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
    #: (gate and statistics keys, events, ``x-router-model``).
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.provider}/{self.model_id}")

    def __str__(self) -> str:
        return self.key
