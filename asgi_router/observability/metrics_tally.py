"""What finished requests add up to, as plain numbers, until a scrape turns them into families.

A finished request adds to a :class:`Tally` on its own task: dictionary increments and a
bisection per histogram, instead of ``prometheus_client``'s own metric objects (each update of
which takes a lock and checks its labels), because the request path is where the work counts
(``docs/performance.md``). ``metrics.py`` turns a tally into metric families when scraped, or, in
multiprocess mode, moves it into ``prometheus_client``'s files and starts a new one.

What a request's candidates count into is found once per candidate key, not once per request:
the tally keeps, by the key an attempt event names, the counts of that key's label (the key
itself if the configuration names it, else ``provider/*``) together with the label's latency
target. A request then costs one dictionary look-up per attempt to reach its counts, with no
folding of the key and no look-up of the target.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from asgi_router.core.usage_bounds import plausible_tokens
from asgi_router.observability.events import RequestRecord

if TYPE_CHECKING:  # the per-caller counts need the metrics extra; this module does not
    from asgi_router.observability.caller_metrics import CallerCounts

__all__ = [
    "DURATION_BUCKETS",
    "QUEUE_WAIT_BUCKETS",
    "TTFB_BUCKETS",
    "Buckets",
    "CandidateCounts",
    "CandidateLabels",
    "RouteCounts",
    "Tally",
]

#: Seconds; chat requests run from well under a second to minutes of streaming.
DURATION_BUCKETS: Final = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
#: Seconds to the first body byte: a streamed token within a second, a whole answer within a minute.
TTFB_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0)
#: Seconds a request waited for capacity: a turn behind one call, up to a long ``max_wait``.
QUEUE_WAIT_BUCKETS: Final = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

# Candidate keys whose counts a tally keeps by key: keys a client chose (a direct
# ``provider/model-id``) beyond this many are folded again on each request, not kept.
_KEYS_KEPT: Final = 4096


class Buckets:
    """One label set's histogram: a count and a sum per bucket (the last one ``+Inf``)."""

    __slots__ = ("bounds", "counts", "sums")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sums = [0.0] * (len(bounds) + 1)

    def add(self, value: float) -> None:
        index = bisect_left(self.bounds, value)  # the first bound >= value ("le")
        self.counts[index] += 1
        self.sums[index] += value


class RouteCounts:
    """One route's requests: a count per status, and their durations."""

    __slots__ = ("duration", "statuses")

    def __init__(self) -> None:
        self.statuses: dict[int, int] = {}
        self.duration = Buckets(DURATION_BUCKETS)


class CandidateCounts:
    """One candidate label's attempts (by outcome and reason), first-byte times and usage."""

    __slots__ = (
        "attempts",
        "cache_read",
        "cache_write",
        "completion",
        "cost",
        "counted",
        "prompt",
        "slow",
        "target",
        "ttfb",
    )

    def __init__(self, target: float | None = None) -> None:
        self.attempts: dict[tuple[str, str], int] = {}
        self.ttfb = Buckets(TTFB_BUCKETS)
        self.prompt = self.completion = 0
        #: Prompt tokens the provider read from its prompt cache and wrote to it (of ``prompt``).
        self.cache_read = self.cache_write = 0
        #: Whether any usage was counted (a candidate with none reports no token series).
        self.counted = False
        self.cost = 0.0
        #: The label's latency target (``None``: none), and the streamed calls whose first byte
        #: came later than it.
        self.target = target
        self.slow = 0


class CandidateLabels:
    """How candidate keys become labels: ``named`` keys are their own label, every other one
    ``provider/*`` (so no client can make the label sets grow); ``targets`` is each label's
    latency target, where it has one."""

    __slots__ = ("named", "targets")

    def __init__(self, named: frozenset[str], targets: Mapping[str, float]) -> None:
        self.named = named
        self.targets = dict(targets)

    def label(self, key: str) -> str:
        return key if key in self.named else key.split("/", 1)[0] + "/*"


class Tally:
    """Requests and attempts added up as plain numbers, by label values (the module docstring).

    ``callers``: the per-caller counts, when callers or sessions are capped.
    """

    __slots__ = (
        "_by_key",
        "_labels",
        "callers",
        "candidates",
        "guardrails",
        "hedges",
        "queued",
        "resumes",
        "routes",
        "sticky",
    )

    def __init__(self, labels: CandidateLabels, callers: CallerCounts | None = None) -> None:
        self._labels = labels
        self.callers = callers
        self.routes: dict[str, RouteCounts] = {}
        #: Counts by candidate label, and the same objects by candidate key (found once per key).
        self.candidates: dict[str, CandidateCounts] = {}
        self._by_key: dict[str, CandidateCounts] = {}
        self.hedges: dict[str, int] = {}
        self.resumes: dict[tuple[str, str], int] = {}
        #: ``(group, outcome)`` counts of sticky requests, and waits for capacity.
        self.sticky: dict[tuple[str, str], int] = {}
        self.queued: dict[tuple[str, str], Buckets] = {}
        #: ``(guardrail, stage, outcome)`` counts of guardrails' runs.
        self.guardrails: dict[tuple[str, str, str], int] = {}

    def candidate(self, key: str) -> CandidateCounts:
        """The counts of ``key``'s label, kept by ``key`` for the next request."""
        label = self._labels.label(key)
        found = self.candidates.get(label)
        if found is None:
            found = self.candidates[label] = CandidateCounts(self._labels.targets.get(label))
        if len(self._by_key) < _KEYS_KEPT:
            self._by_key[key] = found
        return found

    def observe(self, record: RequestRecord, path: str) -> None:
        """Count one finished request on ``path`` and each of its attempts.

        On every request's path: plain dictionary and list arithmetic, written out rather than
        through helpers (a call costs as much as the arithmetic it would hide).
        """
        route = self.routes.get(path)
        if route is None:
            route = self.routes[path] = RouteCounts()
        statuses, status = route.statuses, record.status
        statuses[status] = statuses.get(status, 0) + 1
        buckets, value = route.duration, record.latency
        index = bisect_left(DURATION_BUCKETS, value)  # the first bound >= value ("le")
        buckets.counts[index] += 1
        buckets.sums[index] += value
        by_key, stream = self._by_key, record.stream
        for event in record.events:
            counts = by_key.get(event.candidate) or self.candidate(event.candidate)
            attempts, outcome = counts.attempts, (event.outcome, event.reason)
            attempts[outcome] = attempts.get(outcome, 0) + 1
            ttfb = event.ttfb
            if ttfb is not None:
                buckets = counts.ttfb
                index = bisect_left(TTFB_BUCKETS, ttfb)
                buckets.counts[index] += 1
                buckets.sums[index] += ttfb
                if stream and counts.target is not None and ttfb > counts.target:
                    counts.slow += 1
        winner = record.winner
        if winner is not None and (record.tokens_measured or record.cost_usd):
            counts = by_key.get(winner) or self.candidate(winner)
            if record.tokens_measured:
                # Bounded again here: a counter that cannot become a float fails every later scrape.
                prompt, completion = plausible_tokens(record.prompt_tokens), plausible_tokens(record.completion_tokens)
                if prompt is not None and completion is not None:
                    counts.prompt += prompt
                    counts.completion += completion
                    counts.counted = True
                    if record.cached_prompt_tokens or record.cache_write_tokens:  # within the prompt
                        counts.cache_read += min(record.cached_prompt_tokens, prompt)
                        counts.cache_write += min(record.cache_write_tokens, prompt)
            cost = record.cost_usd
            if cost and math.isfinite(cost) and cost > 0:
                counts.cost += cost
        if record.hedge is not None:
            self.hedges[record.hedge] = self.hedges.get(record.hedge, 0) + 1
        for broken, resumed in record.resumes:
            counted = (self._labels.label(broken), resumed)
            self.resumes[counted] = self.resumes.get(counted, 0) + 1
        if record.caller is not None and self.callers is not None:
            self.callers.observe(record)
        if record.sticky is not None:
            self.sticky[record.sticky] = self.sticky.get(record.sticky, 0) + 1
        if record.queued is not None:
            waited_in = record.queued[:2]
            waits = self.queued.get(waited_in)
            if waits is None:
                waits = self.queued[waited_in] = Buckets(QUEUE_WAIT_BUCKETS)
            waits.add(record.queued[2])
        if record.guardrails:
            ran = self.guardrails
            for pair, stage in zip(record.guardrails, record.guardrail_stages, strict=False):
                ran_as = (pair[0], stage, pair[1])
                ran[ran_as] = ran.get(ran_as, 0) + 1
