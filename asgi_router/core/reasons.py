"""Every rule about "is this failure worth another candidate" lives here, and only here.

The classification is a pure function over what came back from one attempt: an HTTP status, or
the exception that ended the attempt before a usable response. Its answer is a :data:`Reason`
from a bounded vocabulary; whether that reason fails over is a separate, per-group policy
(:data:`DEFAULT_FAILOVER`). The tables below are the single source of truth for DESIGN.md §4:

================================  ===================  ==============================
what came back                    reason               default action
================================  ===================  ==============================
connect refused / DNS / TLS /     ``connect_error``    next candidate
connection dropped before a
usable response
connect, first-byte or idle       ``timeout``          next candidate
timeout; upstream 408
429                               ``rate_limited``     next candidate
5xx; a response the router        ``upstream_5xx``     next candidate
cannot use (1xx/3xx status,
body over the response cap)
401 / 403                         ``auth_error``       next candidate
402                               ``billing``          next candidate
404                               ``model_not_found``  next candidate
400 whose error says the context  ``context_window``   next candidate (the only 400 that
window was exceeded                                    fails over: windows are per model)
other 4xx                         ``client_error``     stop: relay status and body
2xx                               ``served``           commit
2xx that ends with no body        ``stream_interrupted``  next candidate
================================  ===================  ==============================

Skips are not failures: a candidate is skipped before it is called when its provider has no key
(``provider_not_configured``), its catalog context window cannot hold the request
(``context_window``) or its rpm/tpm budget is spent (``over_budget``). ``hedge_lost`` marks the
slower of two raced candidates, cancelled when the other committed.

An exception this module does not recognise is *not* retried (Bifrost's rule): an unknown
failure is more likely a bug here than a flaky upstream, and retrying it would only hide it.
It is the router's own failure (``router_error``: its own client broke, say, "Event loop is
closed"), so it counts against no upstream: neither breaker nor routing statistics see it.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["Reason"]

Reason = Literal[
    "served",
    "connect_error",
    "timeout",
    "rate_limited",
    "upstream_5xx",
    "auth_error",
    "billing",
    "model_not_found",
    "client_error",
    "stream_interrupted",
    "provider_not_configured",
    "client_disconnected",
    "circuit_open",
    "saturated",
    "budget_exhausted",
    "over_budget",
    "context_window",
    "hedge_lost",
    "router_error",
]
