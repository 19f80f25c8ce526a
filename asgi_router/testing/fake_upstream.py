"""A scriptable fake upstream: a real HTTP server that answers as a test tells it to.

``with FakeUpstream() as up:`` serves an OpenAI-compatible API on a free ``127.0.0.1`` port
(``FakeUpstream(port=8001)``: that one; ``up.base_url`` ends in ``/v1``);
an ``openai`` fake also answers ``POST .../responses`` natively, as OpenAI's Responses API
(``openai_responses_wire.py``); ``FakeUpstream(kind="anthropic")`` serves Anthropic's Messages
API instead (its
``up.provider()`` says ``kind = "anthropic"``). An ``openai`` fake keeps each Responses API
answer it gave, as OpenAI stores them: ``GET``/``DELETE .../responses/{id}``,
``GET .../responses/{id}/input_items`` and ``POST .../responses/{id}/cancel`` answer from it
(``up.stored``). ``up.script(model_id, *replies)`` sets what a
model id answers, one reply per request in turn, the last one repeating; a model nobody
scripted answers ``reply.ok()`` with a text naming it. Every request is kept in ``up.hits``.
``up.reset()`` forgets scripts and hits, so one server can serve a whole test session.

For a test that needs more than scripts (an answer that depends on the request), subclass and
override :meth:`FakeUpstream.reply_for`. A ``FakeUpstream`` is also the ASGI app it serves:
an app that runs its own servers can serve it itself instead of calling :meth:`start`.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Final, Self

from starlette.types import Receive, Scope, Send

from asgi_router.testing.anthropic_wire import AnthropicWire
from asgi_router.testing.hits import Hit
from asgi_router.testing.openai_responses_wire import ResponsesWire
from asgi_router.testing.openai_wire import OpenAIWire
from asgi_router.testing.playback import PlayedCall, play
from asgi_router.testing.reply import Reply, ok, status
from asgi_router.testing.server import AppServer, Served
from asgi_router.testing.wire_format import Wire

__all__ = ["TEST_KEY", "WIRES", "FakeUpstream"]

#: The API key :meth:`FakeUpstream.provider` configures unless told another.
TEST_KEY: Final = "sk-fake-upstream-test-key"

#: The protocols a fake upstream speaks, by ``kind``.
WIRES: Final[dict[str, type[Wire]]] = {"openai": OpenAIWire, "anthropic": AnthropicWire}


class FakeUpstream(Served):
    """An upstream API served on loopback, answering as scripted (see the module docstring).

    ``kind`` is the protocol (``"openai"`` or ``"anthropic"``); ``api_key`` the key
    :meth:`provider` gives the router (the fake accepts any: ``hits`` show which one came).
    ``host`` and ``port`` choose where it listens (default: a free ``127.0.0.1`` port), for a
    router whose configuration names a fixed ``base_url``.
    """

    def __init__(
        self, *, kind: str = "openai", api_key: str = TEST_KEY, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        if kind not in WIRES:
            raise ValueError(f"unknown kind {kind!r}: a fake upstream speaks {', '.join(sorted(WIRES))}")
        self.kind = kind
        self.api_key = api_key
        self._wire: Wire = WIRES[kind]()
        #: OpenAI's API also serves the Responses API: its own wire, for its own route.
        self._responses: ResponsesWire | None = ResponsesWire() if kind == "openai" else None
        self._lock = threading.Lock()
        self._scripts: dict[str, list[Reply]] = {}
        self._hits: list[Hit] = []
        #: Requests being answered right now, and the most at once since the last :meth:`reset`.
        self.in_flight = 0
        self.peak_in_flight = 0
        self._server: AppServer | None = None
        self._host = host
        self._port = port

    # --- what a test configures and reads --------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1`` (the host and port it serves on): what a provider's
        ``base_url`` is set to."""
        if self._server is None:
            raise RuntimeError("the fake upstream is not running: use 'with FakeUpstream() as up:'")
        return self._server.url + self._wire.base_path

    def provider(self, **extra: Any) -> dict[str, Any]:
        """A provider entry for ``RouterSettings(providers={name: up.provider()})``: this fake's
        ``base_url`` and a test key, plus ``extra`` (``timeouts={...}``, ``max_concurrent``...)."""
        return {"base_url": self.base_url, "api_key": self.api_key, **self._wire.provider_fields, **extra}

    @property
    def hits(self) -> list[Hit]:
        """Every request received since the last :meth:`reset`, oldest first (a copy)."""
        with self._lock:
            return list(self._hits)

    def script(self, model_id: str, *replies: Reply) -> None:
        """Answer requests for ``model_id`` with ``replies``, one each in turn, the last one
        repeating for every request after it. Replaces the model's earlier script."""
        if not replies:
            raise ValueError("script() needs at least one reply")
        for reply in replies:
            if not isinstance(reply, Reply):
                raise TypeError(f"not a reply: {reply!r} (build replies with asgi_router.testing.reply)")
        with self._lock:
            self._scripts[model_id] = list(replies)

    @property
    def stored(self) -> dict[str, dict[str, Any]]:
        """The Responses API responses this fake holds, by id (a copy): what ``GET
        .../responses/{id}`` answers, until deleted or forgotten (:meth:`forget`; ids are
        never reused, so :meth:`reset` keeps them)."""
        return self._responses.stored() if self._responses is not None else {}

    def forget(self, response_id: str | None = None) -> None:
        """Forget a stored response (``None``: every one), as a provider whose copy expired:
        calls about it get OpenAI's 404."""
        if self._responses is not None:
            self._responses.forget(response_id)

    def reset(self) -> None:
        """Forget every script and hit, and the peak of requests at once."""
        with self._lock:
            self._scripts.clear()
            self._hits.clear()
            self.peak_in_flight = self.in_flight

    def reply_for(self, hit: Hit) -> Reply:
        """What to answer ``hit`` with: a chat request follows its model's script (or gets
        ``reply.ok()``) unless the real API would refuse it (no model; for Anthropic's, no
        ``anthropic-version`` header, ``max_tokens`` or ``messages``), ``GET .../models`` lists
        the models scripted or asked for, a call about a stored Responses API response answers
        from what this fake stored, anything else is a 404.

        Override it to answer from the request itself; call ``super().reply_for(hit)`` for
        the scripted behaviour. It runs on the server's event loop: it must not block.
        """
        wire = self._wire_for(hit)
        if wire.is_chat(hit.method, hit.path):
            refused = wire.refusal(hit)
            if refused is not None:
                code, message = refused
                return status(code, body=wire.error(code, message))
            with self._lock:
                script = self._scripts.get(hit.model)
                if script:
                    return script.pop(0) if len(script) > 1 else script[0]
            return ok()
        if self._responses is not None and (held := self._responses.stored_call(hit)) is not None:
            code, body = held
            return status(code, body=body)
        if self._wire.is_model_list(hit.method, hit.path):
            with self._lock:
                known = {*self._scripts, *(seen.model for seen in self._hits if seen.model)}
            return status(200, body=self._wire.model_list(sorted(known)))
        return status(404, body=self._wire.unknown_route(hit.method, hit.path))

    # --- serving ---------------------------------------------------------------------------

    def start(self) -> Self:
        """Serve on a free loopback port; return once it accepts connections."""
        if self._server is not None:
            raise RuntimeError("the fake upstream is already running")
        server = AppServer(self, host=self._host, port=self._port, lifespan="off", graceful_shutdown=1.0)
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        """Stop serving (requests still open get a second to finish, then are cancelled)."""
        server, self._server = self._server, None
        if server is not None:
            server.stop()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        raw = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            raw += message.get("body", b"")
            if not message.get("more_body", False):
                break
        hit = self._arrived(scope, raw)
        try:
            async with PlayedCall(receive, send, hit, self._wire.response_headers) as call:
                await play(self.reply_for(hit), call, self._wire_for(hit))
        finally:
            with self._lock:
                self.in_flight -= 1
            hit.finish()

    def _wire_for(self, hit: Hit) -> Wire:
        """The wire that answers ``hit``: the Responses API's for its route, else the kind's own."""
        responses = self._responses
        return responses if responses is not None and responses.is_chat(hit.method, hit.path) else self._wire

    def _arrived(self, scope: Scope, raw: bytes) -> Hit:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        model, stream = self._wire.request(body)
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        client = scope.get("client")
        hit = Hit(
            model,
            scope["path"],
            headers,
            body,
            stream,
            method=scope["method"],
            client_port=client[1] if client else 0,
            query=scope.get("query_string", b"").decode("latin-1"),
        )
        with self._lock:
            self._hits.append(hit)
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        return hit

    def __repr__(self) -> str:
        where = self.base_url if self._server is not None else "not running"
        return f"<FakeUpstream kind={self.kind!r} {where}>"
