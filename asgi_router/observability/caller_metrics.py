"""The per-caller families of the Prometheus metrics, when callers or sessions are capped::

    asgi_router_caller_requests_total{caller, outcome}  outcome: served | downgraded | refused
    asgi_router_caller_cost_usd_total{caller}           where the catalog has prices
    asgi_router_caller_tokens_total{caller, kind}       kind: prompt | completion

``caller`` is a caller with a table of its own (``callers.<name>``), a caller a virtual key names
(an operator issued it: at most :data:`MOST_KEY_CALLERS` of them), or ``other``: principals are
the clients' (an ``authorize=`` callable may return one per user), so no other value is ever a
label and the label sets stay bounded however many callers come. Tokens and cost are what the
caps count: the upstream's usage, else the router's estimate (``asgi_router_tokens_total`` reports
stated usage only), so that a dashboard agrees with ``tokens_per_day``.

Only ``metrics.py`` imports this module (both need the ``metrics`` extra). Like the rest of the
metrics, a finished request adds plain numbers to
:class:`CallerCounts` and a scrape (or, in multiprocess mode, a flush) turns them into families.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from prometheus_client import Counter
from prometheus_client.core import CounterMetricFamily, Metric

from asgi_router.observability.events import RequestRecord

__all__ = ["MOST_KEY_CALLERS", "OTHER_CALLERS", "CallerCounts"]

#: The label of every caller without a table of its own.
OTHER_CALLERS: Final = "other"
#: Callers named only by virtual keys that get labels of their own; beyond, ``other``.
MOST_KEY_CALLERS: Final = 1_000

_REQUESTS = ("asgi_router_caller_requests", "Chat requests by caller: served, downgraded or refused by its caps.")
_COST = ("asgi_router_caller_cost_usd", "USD callers' requests cost, from the catalog's prices.")
_TOKENS = ("asgi_router_caller_tokens", "Tokens callers' requests used, as caller caps count them.")


class CallerCounts:
    """Requests, tokens and cost per caller label, as plain numbers (see the module docstring)."""

    __slots__ = ("_configured", "_files", "cost", "names", "requests", "tokens")

    def __init__(self, names: Iterable[str]) -> None:
        self.names = set(names)
        self._configured = len(self.names)
        self.requests: dict[tuple[str, str], int] = {}
        self.tokens: dict[str, list[int]] = {}
        self.cost: dict[str, float] = {}
        self._files: _Files | None = None

    def name(self, caller: str) -> None:
        """Give ``caller``, named by a virtual key, a label of its own (within the bound)."""
        if caller not in self.names and len(self.names) < self._configured + MOST_KEY_CALLERS:
            self.names.add(caller)

    def observe(self, record: RequestRecord) -> None:
        """Count one finished request of a capped router (``record.caller`` is set)."""
        caller = record.caller
        label = caller if caller in self.names else OTHER_CALLERS
        key = (label, record.caller_outcome or "served")
        self.requests[key] = self.requests.get(key, 0) + 1
        if record.prompt_tokens is not None and record.completion_tokens is not None:
            counted = self.tokens.get(label)
            if counted is None:
                counted = self.tokens[label] = [0, 0]
            counted[0] += record.prompt_tokens
            counted[1] += record.completion_tokens
        if record.cost_usd:
            self.cost[label] = self.cost.get(label, 0.0) + record.cost_usd

    def families(self) -> list[Metric]:
        """The three families, from the counts so far (one process)."""
        requests = CounterMetricFamily(*_REQUESTS, labels=["caller", "outcome"])
        for (label, outcome), count in self.requests.items():
            requests.add_metric([label, outcome], count)
        cost = CounterMetricFamily(*_COST, labels=["caller"])
        for label, value in self.cost.items():
            cost.add_metric([label], value)
        tokens = CounterMetricFamily(*_TOKENS, labels=["caller", "kind"])
        for label, (prompt, completion) in self.tokens.items():
            tokens.add_metric([label, "prompt"], prompt)
            tokens.add_metric([label, "completion"], completion)
        return [requests, cost, tokens]

    def flush(self) -> None:
        """Multiprocess mode: move the counts into ``prometheus_client``'s files and start again."""
        files = self._files
        if files is None:
            files = self._files = _Files()
        for (label, outcome), count in self.requests.items():
            files.requests.labels(label, outcome).inc(count)
        for label, value in self.cost.items():
            files.cost.labels(label).inc(value)
        for label, (prompt, completion) in self.tokens.items():
            files.tokens.labels(label, "prompt").inc(prompt)
            files.tokens.labels(label, "completion").inc(completion)
        self.requests, self.tokens, self.cost = {}, {}, {}


class _Files:
    """``prometheus_client``'s own counters, for multiprocess mode (their values live in files)."""

    def __init__(self) -> None:
        self.requests = Counter(*_REQUESTS, ["caller", "outcome"], registry=None)
        self.cost = Counter(*_COST, ["caller"], registry=None)
        self.tokens = Counter(*_TOKENS, ["caller", "kind"], registry=None)
