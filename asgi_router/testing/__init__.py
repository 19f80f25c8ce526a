"""A test kit for apps that mount the router: scripted fake upstreams on real sockets.

Installed with the ``testing`` extra (``pip install "asgi-router[testing]"``: pytest and uvicorn).
What a user's tests need, and what the project's own tests, demo and docs use:

* :class:`FakeUpstream`: an OpenAI-compatible server on a free ``127.0.0.1`` port, or the
  ``host`` and ``port`` given (or, with ``kind="anthropic"``, one of Anthropic's Messages API),
  answering each model id as scripted with :mod:`asgi_router.testing.reply` (``ok``,
  ``tool_call``, ``status``, ``stall``, ``stall_after_headers``, ``broken_stream``,
  ``stream_error``, ``slow``, ``split_writes``, ``raw``), and keeping every request it received as a :class:`Hit`;
* :class:`CapturedEvents`: an event sink that keeps each request's record, to wait for and
  assert on its attempts;
* :class:`AppServer`: serves an ASGI app (yours, with the router) on a free loopback port (or
  the ``host`` and ``port`` given), so a client such as the ``openai`` SDK talks to it over a
  real socket;
* ``python -m asgi_router.testing serve --port 8001 --script gpt-4o=503,200``: a scripted fake
  served until stopped, for a router configured by a file or an app outside Python;
* a pytest plugin (loaded by the ``pytest11`` entry point) with the ``fake_upstream`` and
  ``fake_anthropic_upstream`` fixtures: one server of each for the session, reset before each
  test, for sync and anyio tests alike.

Modules: ``reply`` (what a fake answers), ``fake_upstream`` (the server, its scripts and hits),
``hits`` (:class:`Hit`), ``playback`` (a reply played on one request), ``wire_format`` (the
protocol seam), ``openai_wire`` and ``anthropic_wire`` (the two wire formats),
``openai_responses_wire`` (OpenAI's Responses API, which an ``openai`` fake also answers), ``captured``
(:class:`CapturedEvents`), ``server`` (:class:`AppServer`), ``scripted_serve`` (the ``serve``
command and its script grammar; ``__main__`` runs it), ``memory_transport`` (an upstream in
memory, with no socket: the project's own relay tests and benchmark drive the router through
it; not part of the kit's stable names). The library never imports this package.
"""

from asgi_router.testing import reply
from asgi_router.testing.captured import CapturedEvents
from asgi_router.testing.fake_upstream import TEST_KEY, FakeUpstream
from asgi_router.testing.hits import Hit
from asgi_router.testing.server import AppServer

__all__ = ["TEST_KEY", "AppServer", "CapturedEvents", "FakeUpstream", "Hit", "reply"]
