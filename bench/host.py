"""The host app: a Starlette app with ``ModelRouter`` mounted, as a user would mount it.

It is configured from the environment so that one module serves every scenario:
``BENCH_UPSTREAM`` (the mock upstream's origin), ``BENCH_REFUSED`` (an origin that refuses
connections) and ``BENCH_TRANSPORT`` (``aiohttp`` or ``httpx``). Groups:

* ``group/bench``: ``up/ok`` then ``up2/ok`` — a two-member group whose first member is healthy;
* ``group/failover``: ``down/ok`` (refused) then ``up/ok`` — the failover scenario;
* ``group/slow``: ``up/slow`` then ``up2/slow`` — the slow streams of the open-streams scenario.
* ``group/cached``: ``up/ok`` then ``up2/ok`` with a response cache: after its first request
  every answer is a cache hit (the ``cache-hit`` row, beside the floor's pass-through);
* ``group/translated``: ``claude/ok`` then ``up2/ok`` — ``claude`` is the same upstream as an
  Anthropic provider (``kind = "anthropic"``): chat completions translated to its Messages route
  and its stream back, for translated streaming beside same-protocol streaming (``group/bench``).

The pool is sized for 1,000 concurrent streams; timeouts are the defaults but for ``connect``.
Inbound auth is off (``allow_unauthenticated``, as in demo_app): the floor has none either, and
an ``api_keys`` check is a constant-time compare of one header, well under a microsecond.
Circuit breakers run (their bookkeeping is part of every request) but never open: with the
defaults, ``down`` would be skipped after five refusals and the failover scenario would measure
a skip, not the refused connection it is about.
``BENCH_STATE_URL`` shares the router's state through that Redis (the fleet part).
``gc_freeze`` is on, as docs/performance.md recommends for production (``BENCH_GC_FREEZE=0``
turns it off to see what it is worth). ``BENCH_METRICS=1`` serves Prometheus metrics on
``/metrics`` (target ``router-metrics``: what counting every request and attempt costs).
``BENCH_CALLERS=1`` caps every caller and session with caps no request reaches (what counting
them costs, for a server measured from outside). ``BENCH_KEYS=1`` sets ``admin_keys`` and a
config key (``api_keys``) with an in-memory ledger: the same process is two targets, ``router-keys``
(the bench creates a virtual key through the admin API and sends it with every request) and
``router-config-key`` (the config key on every request), so that ``router-keys/router-config-key``
is what a virtual key costs against a config key, the ledger on both.
"""

from __future__ import annotations

import os
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from asgi_router import ModelRouter, RouterSettings

__all__ = ["ADMIN_KEY", "CONFIG_KEY", "app", "build", "settings_for"]

#: The ``keys`` variant's admin key and config key (``api_keys``).
ADMIN_KEY = "bench-admin-key-0123456789"
CONFIG_KEY = "bench-config-key-0123456789"
#: Inbound auth for the ``keys`` variant: a config key beside the virtual keys, and the ledger.
_KEYS: dict[str, Any] = {
    "admin_keys": [ADMIN_KEY],
    "api_keys": {"bench": CONFIG_KEY},
    "ledger_url": "memory://",
    "allow_unauthenticated": False,
}


#: Caller and session caps for the ``callers`` variant: every cap counted, none ever reached.
_CALLERS: dict[str, Any] = {
    "callers": {"*": {"usd_per_day": 1e9, "tokens_per_day": 10**12, "rpm": 10**7}},
    "sessions": {"tokens_per_session": 10**12},
}


def settings_for(
    upstream: str,
    refused: str,
    transport: str,
    gc_freeze: bool = True,
    state_url: str | None = None,
    metrics: bool = False,
    callers: bool = False,
    sticky: bool = False,
    keys: bool = False,
) -> RouterSettings:
    """The bench's router settings (see the module docstring); ``callers``: every caller capped
    (daily USD and tokens, rpm) and every session too, with caps no request reaches; ``sticky``:
    the ``bench`` group sticks sessions to members (in memory unless ``state_url``)."""
    timeouts = {"connect": 2.0}
    providers: dict[str, Any] = {
        name: {"base_url": f"{origin}/v1", "api_key": "sk-bench", "timeouts": timeouts}
        for name, origin in (("up", upstream), ("up2", upstream), ("down", refused))
    }
    providers["claude"] = {**providers["up"], "kind": "anthropic"}
    return RouterSettings.model_validate(
        {
            "providers": providers,
            "groups": {
                "bench": {"members": ["up/ok", "up2/ok"], **({"sticky": {"key": "session"}} if sticky else {})},
                "failover": {"members": ["down/ok", "up/ok"]},
                "slow": {"members": ["up/slow", "up2/slow"]},
                "translated": {"members": ["claude/ok", "up2/ok"]},
                "cached": {"members": ["up/ok", "up2/ok"], "cache": {}},
                # A plan with a candidate that may continue a broken stream: whole events only.
                "resumable": {"members": [{"ref": "up/ok", "resume": "prefill"}, "up2/ok"]},
            },
            "pool": {"max_connections": 4096},
            "transport": transport,
            "gc_freeze": gc_freeze,
            "allow_unauthenticated": True,
            "breaker": {"consecutive_failures": 10**9, "min_requests": 10**9},
            "state_url": state_url,
            **({"metrics_route": "/metrics"} if metrics else {}),
            **(_CALLERS if callers else {}),
            **(_KEYS if keys else {}),
        }
    )


def build(host_settings: RouterSettings) -> Starlette:
    """A host app with its own route and the router mounted in front of it."""

    async def health(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    host = Starlette(routes=[Route("/health", health)])
    host.add_middleware(ModelRouter, settings=host_settings)
    return host


app = build(
    settings_for(
        os.environ.get("BENCH_UPSTREAM", "http://127.0.0.1:8001"),
        os.environ.get("BENCH_REFUSED", "http://127.0.0.1:9"),
        os.environ.get("BENCH_TRANSPORT", "aiohttp"),
        os.environ.get("BENCH_GC_FREEZE", "1") != "0",
        os.environ.get("BENCH_STATE_URL") or None,
        os.environ.get("BENCH_METRICS", "0") == "1",
        callers=os.environ.get("BENCH_CALLERS", "0") == "1",
        keys=os.environ.get("BENCH_KEYS", "0") == "1",
    )
)
