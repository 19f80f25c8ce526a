"""``JsonlSink``: finished requests as JSON lines in a file, the input of ``asgi-router replay``.

Each line is one routed request: its id, when it arrived, the client's ``model`` (``ref``), the
request facts the configured rules read (``facts``: the token estimate, images, tools, stream,
reasoning, and the values of only the headers and ``metadata`` keys some rule names), the rule
and plan it got, and its attempts (candidate, outcome, reason, status, timings), with the status
and winner they came to. Nothing else from the request is written: no message, no other header,
no principal, no key. A router that has this sink keeps those facts on each request's record
(``records_facts``); other routers do not even compute them.

Requests that never reached routing (refused by auth, an unreadable body, a ``model`` that is
not a valid reference) are not written: there is nothing to replay.

The sink is synchronous, so the event bus runs it in a worker thread of its own: the file is
written off the event loop, a line at a time (line-buffered), and a slow disk slows only this
sink (whose queue then drops and counts records rather than hold a request up). Several worker
processes should each write a file of their own: ``{pid}`` in the path is replaced with the
process id.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import IO, Final

from asgi_router.observability.events import RequestRecord

__all__ = ["FORMAT_VERSION", "JsonlSink", "record_line"]

#: The ``v`` of every line; raised when a field changes meaning.
FORMAT_VERSION: Final = 1


def record_line(record: RequestRecord) -> dict[str, object]:
    """The JSON object written for ``record``."""
    return {
        "v": FORMAT_VERSION,
        "request_id": record.request_id,
        "time": round(record.started_at, 3),
        "ref": record.ref,
        "facts": record.facts or {},
        "route": record.route,
        "plan": list(record.plan),
        "status": record.status,
        "winner": record.winner,
        "latency": round(record.latency, 6),
        "attempts": [
            {
                "candidate": event.candidate,
                "outcome": event.outcome,
                "reason": event.reason,
                "status": event.status,
                "latency": round(event.latency, 6),
                "ttfb": round(event.ttfb, 6) if event.ttfb is not None else None,
                **({"cause": event.cause} if event.cause is not None else {}),
            }
            for event in record.events
        ],
    }


class JsonlSink:
    """Appends one JSON line per routed request to ``path`` (see the module docstring)."""

    #: Asks the router to keep the request facts the rules read on each record.
    records_facts = True

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(str(path).replace("{pid}", str(os.getpid())))
        self._file: IO[str] | None = None
        self._lock = threading.Lock()

    def __call__(self, record: RequestRecord) -> None:
        if record.facts is None or record.ref == "-":
            return  # never routed: nothing to replay
        line = json.dumps(record_line(record), separators=(",", ":"), ensure_ascii=False) + "\n"
        with self._lock:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("a", encoding="utf-8", buffering=1)
            self._file.write(line)

    def close(self) -> None:
        """Close the file (a later record opens it again)."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
