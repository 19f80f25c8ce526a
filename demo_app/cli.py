"""``python -m demo_app``: the mock upstreams and the host app in one process, one command.

Everything runs in one asyncio loop: three mock upstreams on free loopback ports, and the host
app (``ModelRouter`` mounted) on ``--host``/``--port``. Once all accept connections, a banner
shows what to try. Ctrl-C or SIGTERM stops the host app first (in-flight responses finish,
the router's upstream client is closed by the lifespan shutdown), then the mocks; a second
Ctrl-C skips the waiting.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence

from .app import DEFAULT_FIRST_BYTE_TIMEOUT, REAL_PROVIDERS, STATUS_ROUTE, create_app
from .mock_upstreams import MockUpstreams, default_specs
from .serving import ServerHandle, bind_socket, url_for
from .workers import Workers

__all__ = ["banner", "curl_commands", "main", "parse_args", "python_snippet", "serve"]

log = logging.getLogger("demo_app")

_DOWN = "nothing listens (connection refused)"
#: What to put in ``model``: the banner and ``--help`` list the same.
_MODELS = (
    "group/demo         flaky/mock-1, then steady/mock-1: every other call fails over",
    "group/slow-first   slow/mock-1, then steady/mock-1: first-byte timeout, then failover",
    "group/rotate       steady/mock-a and steady/mock-b, starting point rotates per request",
    "group/unreachable  down/mock-1, then slow/mock-1: nothing answers, a 502 lists both attempts",
    "steady/any-id      one provider directly; 'demo' is an alias of group/demo",
)

_ASK = "Hello, who is there?"
_ASK_STREAM = "Tell me something, word by word"


def curl_commands(base: str, model: str = "group/demo") -> str:
    """Two curl commands (plain and streaming) against ``base`` (``http://host:port``)."""
    plain = f'{{"model": "{model}", "messages": [{{"role": "user", "content": "{_ASK}"}}]}}'
    stream = f'{{"model": "{model}", "stream": true, "messages": [{{"role": "user", "content": "{_ASK_STREAM}"}}]}}'
    return (
        f"curl -i {base}/v1/chat/completions \\\n"
        f"  -H 'content-type: application/json' \\\n"
        f"  -d '{plain}'\n"
        f"\n"
        f"curl -N -i {base}/v1/chat/completions \\\n"
        f"  -H 'content-type: application/json' \\\n"
        f"  -d '{stream}'\n"
    )


def python_snippet(base: str, model: str = "group/demo") -> str:
    """An ``openai`` SDK script (non-streaming with the router's headers, then streaming)."""
    return f"""\
from openai import OpenAI

# The router holds the upstream keys; the client's key is never forwarded.
client = OpenAI(base_url="{base}/v1", api_key="unused")
messages = [{{"role": "user", "content": "{_ASK}"}}]

raw = client.chat.completions.with_raw_response.create(model="{model}", messages=messages)
print("served by", raw.headers["x-router-model"], "after", raw.headers["x-router-attempts"], "attempt(s)")
print(raw.parse().choices[0].message.content)

stream = client.chat.completions.create(model="{model}", messages=messages, stream=True)
for chunk in stream:
    if chunk.choices:
        print(chunk.choices[0].delta.content or "", end="", flush=True)
print()
"""


def _fleet_lines(workers: int, state_url: str | None) -> list[str]:
    """What to watch when the host app runs in several workers."""
    if state_url:
        from asgi_router.core.store_url import mask_store_url

        return [
            f"{workers} workers share breakers, rotation and budgets through {mask_store_url(state_url)}.",
            "Ask for group/rotate a few times: the log's [worker N] changes from call to call, and",
            "steady/mock-a and steady/mock-b still take turns, as in one process.",
        ]
    return [
        f"{workers} workers, each with its own breakers, rotation and budgets: ask for group/rotate a",
        "few times and a member can come twice in a row. --state-url redis://... shares them.",
    ]


def _indent(text: str, prefix: str = "    ") -> str:
    return "".join(prefix + line if line.strip() else line for line in text.splitlines(keepends=True))


def banner(
    base: str,
    mocks: MockUpstreams,
    first_byte_timeout: float,
    env: dict[str, str] | None = None,
    workers: int = 1,
    state_url: str | None = None,
) -> str:
    """What the demo prints once it is ready: where things are and what to try."""
    env = dict(os.environ) if env is None else env
    urls = mocks.base_urls
    lines = [
        "",
        f"asgi_router demo: host app with ModelRouter on {base}",
        "",
        "Mock upstreams (OpenAI-compatible, in this process):",
    ]
    for name, spec in mocks.specs.items():
        lines.append(f"  {name:<8} {urls[name]:<30} {spec.describe()}")
    lines.append(f"  {mocks.DOWN:<8} {urls[mocks.DOWN]:<30} {_DOWN}")
    lines += [
        f"  (the router gives each mock {first_byte_timeout:g} s to send its first byte)",
        "",
        "Models to ask for:",
        *(f"  {line}" for line in _MODELS),
    ]
    joined = [real for real in REAL_PROVIDERS if env.get(real.key_env)]
    for real in joined:
        lines.append(f"  group/{real.name:<12}{real.name}/{real.model}, then steady/mock-1 (key from ${real.key_env})")
    if not joined:
        names = " or ".join(real.key_env for real in REAL_PROVIDERS)
        lines.append(f"  (set {names} to add real providers)")
    if workers > 1:
        lines += ["", *_fleet_lines(workers, state_url)]
    lines += [
        "",
        "Try it with curl; run it a few times. -i shows the x-router-model, x-router-attempts",
        "and x-request-id headers; the console below logs one line per request (logger asgi_router).",
        "",
        _indent(curl_commands(base)),
        "Or with the openai SDK (pip install openai):",
        "",
        _indent(python_snippet(base)),
        f"Watch the breakers and the requests live: {base}{STATUS_ROUTE}",
        "",
        "Press Ctrl-C to stop.",
        "",
    ]
    return "\n".join(lines)


def _epilog() -> str:
    """``--help``'s account of the mocks (at their default settings) and the models to ask for."""
    mocks = [f"  {name:<8} {spec.describe()}" for name, spec in default_specs().items()]
    mocks.append(f"  {MockUpstreams.DOWN:<8} {_DOWN}")
    return "\n".join(
        [
            "mock upstreams (in this process, on free loopback ports; defaults shown):",
            *mocks,
            "",
            "models to ask for:",
            *(f"  {line}" for line in _MODELS),
        ]
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m demo_app",
        description="Serve a FastAPI app with asgi_router's ModelRouter mounted, routing to\n"
        "built-in mock upstreams (steady, flaky, slow, and down, which refuses connections).\n"
        "No API keys needed.",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="host app address (default: %(default)s)")
    parser.add_argument(
        "--port", type=int, default=8000, help="host app port; 0 picks a free one (default: %(default)s)"
    )
    parser.add_argument(
        "--flaky-rate",
        type=float,
        default=0.5,
        help="share of requests the flaky mock fails with 503, 0 to 1 (default: %(default)s)",
    )
    parser.add_argument(
        "--slow-delay",
        type=float,
        default=3.0,
        help="seconds the slow mock waits before answering (default: %(default)s)",
    )
    parser.add_argument(
        "--first-byte-timeout",
        type=float,
        default=DEFAULT_FIRST_BYTE_TIMEOUT,
        help="the router's first-byte timeout for the mocks, seconds (default: %(default)s)",
    )
    parser.add_argument(
        "--access-log", action="store_true", help="also log uvicorn's access lines (host app and mocks)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="host app worker processes on one socket, as uvicorn --workers runs them (default: %(default)s)",
    )
    parser.add_argument(
        "--state-url",
        default=None,
        help="share breakers, rotation and budgets between the workers through this Redis, "
        "e.g. redis://127.0.0.1:6379/0 (needs the redis extra)",
    )
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error("--port must be between 0 and 65535")
    if not 0.0 <= args.flaky_rate <= 1.0:
        parser.error("--flaky-rate must be between 0 and 1")
    if args.slow_delay < 0 or args.first_byte_timeout <= 0:
        parser.error("--slow-delay must be >= 0 and --first-byte-timeout > 0")
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    return args


def _configure_logging(access_log: bool) -> None:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    # Four uvicorn servers share the process; their start/stop chatter would drown the
    # router's one line per request. Warnings and errors still show.
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    logging.getLogger("uvicorn.access").setLevel(logging.INFO if access_log else logging.WARNING)
    # httpx logs every upstream request at INFO; the router's line already lists the attempts.
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    logging.getLogger("asgi_router").setLevel(logging.INFO)


async def serve(args: argparse.Namespace) -> int:
    """Run the demo until SIGINT/SIGTERM; the process exit code."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = 0
    host: ServerHandle | Workers | None = None
    code = 0
    mocks = MockUpstreams(default_specs(flaky_rate=args.flaky_rate, slow_delay=args.slow_delay))

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            log.info("stopping (Ctrl-C again to skip waiting for open requests)")
            stop.set()
        elif signals == 2:
            log.info("stopping now; open requests are cut off")
            # The requests cut off would each log a CancelledError traceback: expected, not news.
            logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)
            if host is not None:
                host.force_stop()
            mocks.force_stop()

    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # e.g. Windows: KeyboardInterrupt instead
            loop.add_signal_handler(sig, on_signal)
            installed.append(sig)
    try:
        try:
            sock = bind_socket(args.host, args.port)
        except OSError as exc:
            log.error("cannot listen on %s:%s: %s", args.host, args.port, exc.strerror or exc)
            return 1
        base = url_for(sock)
        try:
            await mocks.start()
        except BaseException:
            sock.close()
            raise
        try:
            if args.workers > 1:
                host = Workers(args.workers, sock, dict(mocks.base_urls), args.first_byte_timeout, args.state_url or "")
            else:
                app = create_app(
                    mocks.base_urls,
                    mocks=mocks.specs,
                    first_byte_timeout=args.first_byte_timeout,
                    state_url=args.state_url,
                )
                host = ServerHandle("host app", app, sock, lifespan=True, graceful_shutdown=5)
            await host.start()
            if args.slow_delay <= args.first_byte_timeout:
                log.warning("--slow-delay is not above --first-byte-timeout: the slow mock will not time out")
            text = banner(base, mocks, args.first_byte_timeout, workers=args.workers, state_url=args.state_url)
            print(text, flush=True)
            stopping = asyncio.create_task(stop.wait())
            host_done = asyncio.create_task(host.wait())
            await asyncio.wait({stopping, host_done}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            host_done.cancel()
            if not stop.is_set():
                log.error("the host app's server stopped unexpectedly")
                code = 1
        finally:
            try:
                if host is not None:
                    await host.stop()
                else:
                    sock.close()
            finally:
                await mocks.stop()
        log.info("stopped")
        return code
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m demo_app``."""
    args = parse_args(argv)
    _configure_logging(args.access_log)
    try:
        return asyncio.run(serve(args))
    except KeyboardInterrupt:  # platforms without loop signal handlers
        return 130
