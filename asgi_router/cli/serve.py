"""``asgi-router serve``: the router as a standalone gateway, for users without a host app.

The router wraps a tiny ASGI app of its own that answers everything the router does not (any
other path) with an OpenAI-shaped 404, and takes part in the lifespan, so the router's start-up
and shut-down (its upstream client, event sinks, probes) run as in any host app. uvicorn serves
it with ``--lifespan on``, so a configuration the router refuses stops the server instead of
leaving it answering 500s.

The configuration is validated once before uvicorn starts (a refusal names the key and the
file); each worker process then builds its router from the same file, found through
``ASGI_ROUTER_SERVE_CONFIG``. With several workers and a ``metrics_route``, the metrics must be
the host's, not one worker's: when ``PROMETHEUS_MULTIPROC_DIR`` is not set, a fresh temporary
directory is used for the run (and removed after).

The per-request log line goes to uvicorn's log at the chosen level (``info`` shows it). With
``--record PATH`` each worker adds a :class:`~asgi_router.JsonlSink` writing ``PATH`` (its
``{pid}`` replaced by the worker's process id, so that several workers write a file each):
what ``asgi-router replay`` reads.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Final

import uvicorn
from starlette.types import Receive, Scope, Send
from uvicorn.config import LOGGING_CONFIG

from asgi_router.config.settings import RouterSettings
from asgi_router.core.router_errors import error_body
from asgi_router.middleware import ModelRouter
from asgi_router.observability.jsonl import JsonlSink

__all__ = ["CONFIG_VARIABLE", "RECORD_VARIABLE", "not_found", "serve", "standalone_app"]

#: How ``serve`` tells its worker processes which file to load.
CONFIG_VARIABLE: Final = "ASGI_ROUTER_SERVE_CONFIG"
#: And where to record requests (``--record``; ``{pid}`` replaced in each worker).
RECORD_VARIABLE: Final = "ASGI_ROUTER_SERVE_RECORD"
_NOT_FOUND: Final = error_body(404, "not_found", "this gateway serves the router's routes only")


async def not_found(scope: Scope, receive: Receive, send: Send) -> None:
    """The app behind a standalone router: a 404 for any other path; lifespan acknowledged."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    elif scope["type"] == "http":
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(_NOT_FOUND)).encode())]
        await send({"type": "http.response.start", "status": 404, "headers": headers})
        await send({"type": "http.response.body", "body": _NOT_FOUND})
    elif scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.close", "code": 1000})


def standalone_app() -> ModelRouter:
    """The router over :func:`not_found`, configured from the file ``serve`` names (uvicorn's
    factory: one per worker), recording to the file ``--record`` names, if it names one."""
    record = os.environ.get(RECORD_VARIABLE)
    sinks = [JsonlSink(record)] if record else []
    return ModelRouter(not_found, config=os.environ[CONFIG_VARIABLE], sinks=sinks)


def _log_config(level: str) -> dict[str, Any]:
    """uvicorn's logging, with the router's logger (its line per request) on uvicorn's handler."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["asgi_router"] = {"handlers": ["default"], "level": level.upper(), "propagate": False}
    return config


def serve(
    settings: RouterSettings,
    config: Path,
    host: str,
    port: int,
    workers: int,
    log_level: str,
    record: str | None = None,
) -> int:
    """Run uvicorn until it is stopped (Ctrl-C); its exit status."""
    os.environ[CONFIG_VARIABLE] = str(config.resolve())
    if record is not None:
        os.environ[RECORD_VARIABLE] = str(Path(record).absolute())  # workers may start elsewhere
    scratch: str | None = None
    if workers > 1 and settings.metrics_route is not None and "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        scratch = tempfile.mkdtemp(prefix="asgi-router-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = scratch  # before any worker imports prometheus_client
    try:
        uvicorn.run(
            "asgi_router.cli.serve:standalone_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            lifespan="on",
            log_level=log_level,
            log_config=_log_config(log_level),
        )
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0
