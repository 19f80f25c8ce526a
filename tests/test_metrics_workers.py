"""Metrics under ``--workers 2``: a scrape of either worker counts the whole host's requests.

A real two-worker uvicorn (``asgi-router serve --workers 2``) with ``PROMETHEUS_MULTIPROC_DIR``
set, as the docs say to run it: requests are sent until both workers have served some (each
writes files of its own, named by its process id, once a second), then every scrape, whichever
worker answers it, must count exactly the requests sent.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2

from .commands import serving
from .conftest import CLIENT_KEY
from .metrics_helpers import Scrape
from .mock_upstream import MockUpstream
from .routing_helpers import chat_body
from .waiting import polled

_AUTH = {"authorization": f"Bearer {CLIENT_KEY}"}


def _workers_that_served(directory: Path) -> set[str]:
    """The workers with a histogram file: made at a worker's first request (its duration)."""
    return {match[1] for path in directory.iterdir() if (match := re.fullmatch(r"histogram_(\d+)\.db", path.name))}


def _requests(scrape: Scrape) -> float:
    return scrape.samples.get(
        ("asgi_router_requests_total", frozenset({("path", "/v1/chat/completions"), ("status", "200")})), 0.0
    )


def _ask(url: str) -> int:
    with httpx2.Client() as client:  # a connection of its own: either worker may accept it
        return client.post(f"{url}/v1/chat/completions", json=chat_body("group/g"), headers=_AUTH).status_code


def test_every_scrape_of_a_two_worker_server_counts_every_request_sent(tmp_path: Path, upstream: MockUpstream) -> None:
    shared = tmp_path / "prometheus"
    shared.mkdir()
    config = tmp_path / "router.toml"
    config.write_text(
        f'api_keys = ["{CLIENT_KEY}"]\nmetrics_route = "/metrics"\n'
        f'[providers.mock]\nbase_url = "{upstream.url}/v1"\n'  # type: ignore[attr-defined]
        '[groups.g]\nmembers = ["mock/ok"]\n'
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(shared)}
    sent = 0
    with serving(config, "--workers", "2", env=env) as (url, _), ThreadPoolExecutor(8) as pool:
        while len(_workers_that_served(shared)) < 2:
            assert sent < 800, "one worker served every request"
            statuses = list(pool.map(_ask, [url] * 40))
            assert statuses == [200] * 40
            sent += 40
        # Each worker writes its counts every second: within a couple, any scrape has them all.
        polled(
            lambda: _requests(Scrape(httpx2.get(f"{url}/metrics", headers=_AUTH).text)) == sent,
            within=10,
            every=0.2,
            what="the workers' counts adding up to the requests sent",
        )
        scrapes = [Scrape(httpx2.get(f"{url}/metrics", headers=_AUTH).text) for _ in range(8)]
    for scrape in scrapes:
        assert _requests(scrape) == sent
        assert (
            scrape.value("asgi_router_attempts_total", candidate="mock/ok", outcome="served", reason="served") == sent
        )
        assert scrape.value("asgi_router_time_to_first_byte_seconds_count", candidate="mock/ok") == sent
        assert scrape.value("asgi_router_tokens_total", candidate="mock/ok", kind="completion") == 3 * sent
        assert scrape.value("asgi_router_in_flight", provider="mock") == 0  # summed over live workers
        assert scrape.value("asgi_router_breaker_state", candidate="mock/ok") == 0
    # Stopped, each worker took its gauges with it; the counters stay for the next scrape.
    assert not [path.name for path in shared.iterdir() if path.name.startswith("gauge_live")]
    assert len(_workers_that_served(shared)) == 2
