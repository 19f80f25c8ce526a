"""In multiprocess mode a worker's files say exactly what one process's registry says.

The same requests are counted twice: by a router's metrics in this process, and by one in a
process with ``PROMETHEUS_MULTIPROC_DIR`` set (the mode is chosen when ``prometheus_client`` is
first imported), whose tally is flushed into ``prometheus_client``'s files. Every sample of the
two scrapes must agree: histogram buckets and sums included, values on a bucket's bound and past
the last one included.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from asgi_router import RequestRecord
from asgi_router.observability.metrics import Readings, RouterMetrics

from ..metrics_helpers import Scrape

_ROOT = Path(__file__).resolve().parents[2]
#: Latencies and first-byte times: inside buckets, on their bounds, past the last one.
_TIMES = [0.003, 0.1, 0.1, 0.42, 1.0, 2.5, 7.0, 59.0, 60.0, 75.0, 450.0]

_COUNT = textwrap.dedent(
    """
    import json, sys
    from asgi_router import AttemptEvent, RequestRecord
    from asgi_router.observability.metrics import Readings, RouterMetrics

    def records():
        for index, seconds in enumerate(json.loads(sys.argv[1])):
            event = AttemptEvent("r", 0, "p/m" if index % 2 else "p/other", "served", "served", 200, seconds, seconds)
            record = RequestRecord("r", "group/g", status=200 if index % 3 else 502, latency=seconds, events=[event])
            record.winner, record.tokens_measured = "p/m", True
            record.prompt_tokens, record.completion_tokens = 3, index
            record.cost_usd, record.hedge = 0.25, "won" if index % 2 else None
            yield record

    readings = Readings(breakers=[("p/m", "open")], providers=[("p", "closed", 1)], dropped=4)
    metrics = RouterMetrics({"p/m"}, lambda: readings)
    for record in records():
        metrics.observe(record, "/v1/chat/completions")
    sys.stdout.write(metrics.exposition().decode())
    """
)


def _scrape(env: dict[str, str]) -> Scrape:
    result = subprocess.run(
        [sys.executable, "-c", _COUNT, json.dumps(_TIMES)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=_ROOT,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return Scrape(result.stdout)


def test_a_flushed_worker_reports_every_sample_as_one_process_does(tmp_path: Path) -> None:
    plain = {name: value for name, value in os.environ.items() if name.upper() != "PROMETHEUS_MULTIPROC_DIR"}
    one_process = _scrape(plain)
    workers = _scrape({**plain, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)})
    assert [path.name for path in tmp_path.iterdir()]  # it did write files
    assert one_process.samples.keys() == workers.samples.keys()
    for key, value in one_process.samples.items():
        assert workers.samples[key] == pytest.approx(value), key
    assert one_process.value("asgi_router_request_duration_seconds_bucket", path="/v1/chat/completions", le="0.1") == 3
    assert one_process.value("asgi_router_time_to_first_byte_seconds_bucket", candidate="p/*", le="+Inf") == 6


def test_a_value_on_a_bucket_bound_is_counted_in_that_bucket() -> None:
    metrics = RouterMetrics({"p/m"}, lambda: Readings([], [], 0))
    record = RequestRecord("r", "group/g", status=200, latency=0.5, events=[])
    metrics.observe(record, "/v1/chat/completions")
    scrape = Scrape(metrics.exposition().decode())
    assert scrape.value("asgi_router_request_duration_seconds_bucket", path="/v1/chat/completions", le="0.25") == 0
    assert scrape.value("asgi_router_request_duration_seconds_bucket", path="/v1/chat/completions", le="0.5") == 1
