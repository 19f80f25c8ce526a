"""``GET status_route``: a live status page for people, and ``status_route + ".json"``, its data.

The page answers "which provider is failing right now, how slow is it, what is it using": every
provider and every model the configuration names, with its breaker (and when an open one lets a
probe through, why it opened, how far a recovering one's ramp has come, whether it is slow), its
time-to-first-byte average, its attempts in flight and its rpm/tpm use against
the budget; then, when callers are capped, a Callers table (each cap: spent, limit, resets in);
then, when a group has a ``queue`` or ``sticky`` or a provider's rate-limit headers put a member
over budget, a Capacity table (each queue's depth and how its latest waits ended, each sticky
group's affinities held and how its requests stuck, each member over its provider's stated limit
and when that resets);
then the most recent requests with each attempt; in the header, the ledger (its kind, its URL
masked, how far its writes lag) when there is one. The data is read on demand from the
router's state (``resilience/overview.py``) and its ring of recent requests; nothing is kept for
the page between loads.

The HTML is one self-contained file (``status.html``, package data: its style and script inline,
no CDN, no font or image to fetch), so it works on a machine without internet access. The data
comes embedded in it, and the script re-reads the JSON twin every few seconds, so an open tab
stays current. Its script builds the page with ``textContent`` only (no markup is ever made from
data) and the response's Content-Security-Policy allows exactly that script and style (by hash),
connections to this origin, and nothing else.

With shared state (several workers or hosts sharing breakers and budgets) the breakers and
budgets are the fleet's while the recent requests are this process's own: the page says which.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import re
import time
from collections.abc import Callable, Mapping
from importlib.resources import files
from typing import Final

from asgi_router.attempts.capacity import Capacity
from asgi_router.attempts.rate_limits import RateLimits
from asgi_router.observability.events import RequestRecord, principal_text
from asgi_router.observability.sinks import EventBus, RecentRequests
from asgi_router.resilience.caller_limits import CallerLimits
from asgi_router.resilience.overview import BreakerStatus, Budget, Overview

__all__ = ["CALLERS_SHOWN", "QUEUE_OUTCOMES", "RECENT_SHOWN", "STICKY_OUTCOMES", "StatusEndpoint", "status_template"]

#: The most recent requests shown (newest first).
RECENT_SHOWN: Final = 50
#: Callers without a table of their own shown in the Callers table (most recently seen first).
CALLERS_SHOWN: Final = 20
#: How a wait for capacity ended, and how a sticky request stuck (the metrics' outcomes).
QUEUE_OUTCOMES: Final = ("served", "timed_out", "full", "left")
STICKY_OUTCOMES: Final = ("hit", "miss", "moved")
#: Where the page's data goes: a JSON element, never run as a script.
_DATA_ELEMENT: Final = '<script id="status-data" type="application/json">{}</script>'
_JSON_TYPE: Final = b"application/json"
_HTML_TYPE: Final = b"text/html; charset=utf-8"


def status_template() -> str:
    """The page, with :data:`_DATA_ELEMENT` where its data goes."""
    return files("asgi_router.endpoints").joinpath("status.html").read_text(encoding="utf-8")


def _hashes(template: str, tag: str) -> str:
    found = re.findall(rf"<{tag}>(.*?)</{tag}>", template, re.DOTALL)
    return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()}'" for text in found)


def _json_text(data: object) -> str:
    """``data`` as JSON any parser reads: a figure that is not finite (never expected: the fleet's
    messages are checked as they arrive) is written ``null``, not ``Infinity``."""
    try:
        return json.dumps(data, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(_finite(data), separators=(",", ":"), allow_nan=False)


def _finite(data: object) -> object:
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: _finite(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(value) for value in data]
    return data


def _ms(seconds: float | None) -> float | None:
    return round(seconds * 1000, 1) if seconds is not None else None


def _breaker(status: BreakerStatus) -> dict[str, object]:
    opens = status.half_opens_in
    return {
        "phase": status.phase,
        "half_opens_in": round(opens, 1) if opens is not None else None,
        "consecutive_failures": status.consecutive_failures,
        "cause": status.cause,
        "share": status.share,
        "notes": list(status.notes),
    }


def _budget(budget: Budget | None) -> dict[str, int] | None:
    return {"used": budget.used, "limit": budget.limit} if budget is not None else None


def _capacity(capacity: Capacity | None, rate_limits: RateLimits | None) -> dict[str, object] | None:
    """Queues, sticky groups and members over their provider's stated limit (``None``: none
    configured and none marked)."""
    limits = rate_limits.in_force() if rate_limits is not None else []
    if capacity is None and not limits:
        return None
    queues: list[dict[str, object]] = []
    sticky: list[dict[str, object]] = []
    if capacity is not None:
        for group, queue in capacity.queues.items():
            waits = list(queue.recent)
            outcomes = {outcome: 0 for outcome in QUEUE_OUTCOMES}
            for outcome, _ in waits:
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
            queues.append(
                {
                    "group": group,
                    "waiting": len(queue),
                    "max_size": queue.settings.max_size,
                    "max_wait": queue.settings.max_wait,
                    "recent": outcomes,
                    "longest_wait_s": round(max((waited for _, waited in waits), default=0.0), 3),
                }
            )
        for group, affinities in capacity.affinities.items():
            sticky.append(
                {
                    "group": group,
                    "affinities": len(affinities),
                    "shared": capacity.fleet is not None,
                    **{outcome: capacity.outcomes.get((group, outcome), 0) for outcome in STICKY_OUTCOMES},
                }
            )
    stated = [
        {"member": member, "limit": limit, "resets_in": round(resets_in, 1), "tokens_left": tokens}
        for member, limit, resets_in, tokens in sorted(limits)
    ]
    return {"queues": queues, "sticky": sticky, "over_stated_limit": stated}


def _request(record: RequestRecord) -> dict[str, object]:
    return {
        "request_id": record.request_id,
        "time": round(record.started_at, 3),
        "ref": record.ref,
        "stream": record.stream,
        "status": record.status,
        "winner": record.winner,
        "route": record.route,
        "degraded": record.degraded,
        "latency_ms": _ms(record.latency),
        "principal": principal_text(record.principal),
        "attempts": [
            {
                "candidate": event.candidate,
                "outcome": event.outcome,
                "reason": event.reason,
                "status": event.status,
                "latency_ms": _ms(event.latency),
                "ttfb_ms": _ms(event.ttfb),
                "cause": event.cause,
            }
            for event in record.events
        ],
    }


class StatusEndpoint:
    """Builds the page and its JSON from one router's state, on each load."""

    def __init__(
        self,
        overview: Overview,
        recent: RecentRequests,
        events: EventBus,
        json_route: str,
        wall_clock: Callable[[], float] = time.time,
        callers: CallerLimits | None = None,
        capacity: Capacity | None = None,
        rate_limits: RateLimits | None = None,
        ledger: Callable[[], dict[str, object]] | None = None,
        guardrail_blocks: Mapping[str, int] | None = None,
    ) -> None:
        self._callers = callers
        #: The ledger's kind, masked URL, lag and row counts (``None``: no ledger).
        self._ledger = ledger
        #: Blocks per guardrail since the router started (``None``: no guardrail configured).
        self._guardrail_blocks = guardrail_blocks
        #: Sticky groups and queues (``None``: no group has either), providers' stated limits.
        self._capacity = capacity
        self._rate_limits = rate_limits
        self._overview = overview
        self._recent = recent
        self._events = events
        self._wall_clock = wall_clock
        self._template = status_template()
        # The script reads its JSON twin by a path relative to the page: it works below a prefix.
        self._json_path = json_route.rsplit("/", 1)[-1]
        #: The page's Content-Security-Policy: its own script and style, requests to this origin.
        self.policy = (
            f"default-src 'none'; script-src {_hashes(self._template, 'script')}; "
            f"style-src {_hashes(self._template, 'style')}; connect-src 'self'; img-src data:; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        ).encode()

    def data(self) -> dict[str, object]:
        """What the page shows, as JSON-able data."""
        overview = self._overview
        # Routed requests only: those refused before routing are counted apart below, so that a
        # flood of them (unauthenticated clients) cannot push routed traffic out of view.
        recent = self._recent.routed()[-RECENT_SHOWN:]
        recent.reverse()
        refused = self._recent.refused()
        refused.reverse()
        by_status = self._recent.refused_by_status()
        return {
            "generated_at": round(self._wall_clock(), 3),
            "pid": os.getpid(),
            "state": "shared" if overview.shared else "this process",
            "providers": [
                {
                    "name": provider.name,
                    "configured": provider.configured,
                    "breaker": _breaker(provider.breaker),
                    "in_flight": provider.in_flight,
                    "max_concurrent": provider.max_concurrent,
                    "candidates": [
                        {
                            "key": candidate.key,
                            "breaker": _breaker(candidate.breaker),
                            "in_flight": candidate.in_flight,
                            "ttfb_ms": _ms(candidate.ttfb),
                            "rpm": _budget(candidate.rpm),
                            "tpm": _budget(candidate.tpm),
                        }
                        for candidate in provider.candidates
                    ],
                }
                for provider in overview.providers()
            ],
            "callers": self._callers.rows(CALLERS_SHOWN) if self._callers is not None else None,
            "capacity": _capacity(self._capacity, self._rate_limits),
            "ledger": self._ledger() if self._ledger is not None else None,
            "guardrails": {"blocks": dict(self._guardrail_blocks)} if self._guardrail_blocks is not None else None,
            "recent": [_request(record) for record in recent],
            "refused": {
                "total": sum(by_status.values()),
                "by_status": {str(status): count for status, count in sorted(by_status.items())},
                "recent": [_request(record) for record in refused],
            },
            "events": {"dropped": self._events.dropped, "failures": self._events.failures},
        }

    def render_json(self) -> tuple[bytes, bytes]:
        return _JSON_TYPE, _json_text(self.data()).encode()

    def render_html(self) -> tuple[bytes, bytes]:
        data = {**self.data(), "json_path": self._json_path}
        # "<" escaped: nothing in the data can close the element it sits in.
        text = _json_text(data).replace("<", "\\u003c")
        element = _DATA_ELEMENT.replace("{}", text)
        return _HTML_TYPE, self._template.replace(_DATA_ELEMENT, element, 1).encode()
