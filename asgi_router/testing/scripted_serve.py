"""``python -m asgi_router.testing serve``: a scripted fake upstream outside pytest and Python.

A router configured by a file (``base_url = "http://127.0.0.1:8001/v1"``) or an app in another
language can be tested against a fake as the kit's own tests are: the command serves a
:class:`~asgi_router.testing.FakeUpstream` on a fixed port until it is stopped (Ctrl-C or
SIGTERM), each model answering as scripted on the command line. The script grammar is small on
purpose, one word per reply, comma-separated, in turn, the last one repeating (as
:meth:`FakeUpstream.script` plays them):

==============  ===========================================================================
``200``         an answer (``reply.ok()``: a text naming the model, streamed when asked)
``503``         any other status from 100 to 599, with the protocol's own error body
``429:2``       that status with ``Retry-After: 2`` (seconds)
``stall``       accept the request and send nothing (``stall:5``: for 5 seconds, then a 504)
``broken:N``    a streamed answer cut after N chunks (the connection dropped)
``slow:2``      nothing for 2 seconds, then an answer (``reply.slow(2)``: a queue's test)
==============  ===========================================================================

A model without a script answers ``200``. A request for ``GET .../models`` lists the models
scripted. One line per request goes to stdout: the model asked for (its control characters
escaped: a client chose it, and the line reaches a terminal) and the reply it got.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Final

from asgi_router.testing import reply
from asgi_router.testing.fake_upstream import WIRES, FakeUpstream
from asgi_router.testing.hits import Hit
from asgi_router.testing.reply import Reply, seconds_text

__all__ = ["STALL_FOREVER", "main", "parse_reply", "parse_script"]

#: How long a bare ``stall`` holds a request: longer than any client waits.
STALL_FOREVER: Final = 24 * 3600.0

_STATUS: Final = re.compile(r"(\d{3})(?::(\d+(?:\.\d+)?))?")


def parse_reply(word: str) -> Reply:
    """One reply of a script (see the module docstring); ``ValueError`` naming the word."""
    text = word.strip()
    status = _STATUS.fullmatch(text)
    if status is not None:
        code = int(status[1])
        if not 100 <= code <= 599:
            raise ValueError(f"{word!r}: a status is 100 to 599")
        if code == 200 and status[2] is None:
            return reply.ok()
        return reply.status(code, retry_after=float(status[2]) if status[2] is not None else None)
    name, colon, argument = text.partition(":")
    try:
        if name == "stall":
            return reply.stall(float(argument) if colon else STALL_FOREVER)
        if name == "broken" and colon:
            return reply.broken_stream(int(argument))
        if name == "slow" and colon:
            return reply.slow(float(argument))
    except ValueError:
        pass
    raise ValueError(f"{word!r} is not a reply: use a status (200, 503), 429:2, stall, stall:5, broken:3 or slow:2")


def parse_script(spec: str) -> tuple[str, list[Reply]]:
    """``MODEL=REPLY,REPLY,...`` as the model id and its replies."""
    model, equals, replies = spec.rpartition("=")
    if not equals or not model.strip() or not replies.strip():
        raise ValueError(f"--script {spec!r}: expected MODEL=REPLY[,REPLY...], e.g. gpt-4o=503,200")
    return model.strip(), [parse_reply(word) for word in replies.split(",")]


class _Announcing(FakeUpstream):
    """A fake that prints a line per request, so the person running it sees what came."""

    def reply_for(self, hit: Hit) -> Reply:
        chosen = super().reply_for(hit)
        print(f"{hit.method} {_printable(hit.path)} {_printable(hit.model or '-')}: {_said(chosen)}", flush=True)
        return chosen


def _printable(text: str) -> str:
    """``text`` with what is not printable escaped (``\\x1b``): a client's string never drives the
    terminal it is printed on."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def _said(chosen: Reply) -> str:
    """A reply in the script's own words."""
    if isinstance(chosen, reply.Status):
        after = chosen.retry_after
        return f"{chosen.code}" + (
            f":{after if isinstance(after, str) else seconds_text(after)}" if after is not None else ""
        )
    if isinstance(chosen, reply.Stall):
        return f"stall:{chosen.seconds:g}"
    if isinstance(chosen, reply.BrokenStream):
        return f"broken:{chosen.after_chunks}"
    if isinstance(chosen, reply.Slow):
        return f"slow:{seconds_text(chosen.seconds)}"
    return "200" if isinstance(chosen, reply.Ok) else type(chosen).__name__


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m asgi_router.testing",
        description="Serve a scripted fake upstream until stopped (Ctrl-C).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="serve a fake upstream", description=__doc__)
    serve.formatter_class = argparse.RawDescriptionHelpFormatter
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=0, help="port to listen on (default: a free one, printed)")
    serve.add_argument("--kind", choices=sorted(WIRES), default="openai", help="the protocol (default openai)")
    serve.add_argument(
        "--script",
        action="append",
        default=[],
        metavar="MODEL=REPLY,...",
        help="what a model answers, in turn, the last reply repeating (repeatable), e.g. gpt-4o=503,200",
    )
    return parser


def _port(text: str) -> int:
    """A TCP port number, 0 to 65535 (0: a free one); else the command line's error."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: use 0 to 65535 (0: a free one)")
    return port


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until SIGINT or SIGTERM; 2 for a command line that does not parse."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        scripts = [parse_script(spec) for spec in args.script]
    except ValueError as exc:
        parser.error(str(exc))
    fake = _Announcing(kind=args.kind, host=args.host, port=args.port)
    for model, replies in scripts:
        fake.script(model, *replies)
    stopped = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopped.set()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        fake.start()
    except RuntimeError as exc:
        print(f"python -m asgi_router.testing serve: {exc}", file=sys.stderr)
        return 1
    print(f"serving a fake {args.kind} upstream at {fake.base_url} (Ctrl-C stops it)", flush=True)
    try:
        while not stopped.wait(0.5):
            pass
    finally:
        fake.stop()
    return 0
