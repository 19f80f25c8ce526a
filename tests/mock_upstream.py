"""An OpenAI-compatible fake upstream whose behaviour is chosen by the request's model id.

One server serves every scenario, so a router config names it once (``mock/<scenario>``) and
each test picks behaviour per candidate. Scenarios (``model`` as the upstream receives it):

=====================  ==================================================================
``ok``                 200; JSON completion, or SSE (sse-starlette) of 3 content chunks, a
                       final chunk with ``finish_reason`` and ``usage``, then DONE
``usage-<n>``          like ``ok``, reporting ``prompt_tokens = n`` (and 3 completion tokens)
``ctx-exceeded``       400 ``context_length_exceeded`` (OpenAI's wording and code)
``ctx-anthropic``      400 ``invalid_request_error`` "prompt is too long" (Anthropic's wording)
``status-<code>``      that status with an OpenAI-shaped error body; options may follow, each
                       after a ``-``: ``ra<s>`` (``Retry-After: <s>``), ``in<s>`` ("try again
                       in <s>s." in the message), ``reset<s>`` (``x-ratelimit-reset-requests:
                       <s>s`` with ``x-ratelimit-remaining-requests: 0``), ``d<ms>`` (answer
                       after ``ms`` milliseconds), ``rid<x>`` (``x-request-id: req_<x>``);
                       anything else is ignored (a unique tag)
``tabhint``            429 whose plain-text body reads ``retry in 2<TAB>seconds``
``fail-<n>-<tag>-<st>``  the first ``n`` requests for this exact model id answer as
                       ``status-<st>`` would, every later one as ``ok`` (stateful, per id)
``hang``               never sends headers (until the client goes away)
``silent``             200 headers, then no body byte ever
``empty``              200 with an empty body
``break-<n>``          streams n events, then drops the connection mid-body
``stall-<n>``          streams n events, then goes silent
``utf8``               one SSE event whose UTF-8 character is split across two writes
``slow-<ms>``          like ``ok`` after ``ms`` milliseconds before the first byte (a client
                       that leaves meanwhile is recorded as ``disconnected``)
``echo``               200 JSON: the headers and body the upstream received
``headers``            200 JSON with ``Set-Cookie``, ``Keep-Alive`` and ``x-upstream`` headers
``rid-<x>``            like ``ok``, answered with the provider's own ``x-request-id: req_<x>``
``anthrid-<x>``        like ``ok``, with Anthropic's ``request-id: req_<x>`` (no ``x-request-id``)
``badrid``             like ``ok``, with an ``x-request-id`` that is not a sane token
``big-<kb>``           200 JSON body of about ``kb`` KiB
``trickle-<n>``        streams n events, 20 ms apart (for disconnect tests)
=====================  ==================================================================

Every request is recorded under its ``x-request-id``: what arrived, on which path (chat is
served on ``/v1/chat/completions`` and ``/v1/llm/chat/completions``), and whether the upstream
finished or saw the client disconnect. Records are read from the test thread.

``GET /v1/health/<tag>`` answers with ``health_status[tag]`` (default 200) and counts its hits
in ``health_hits``: a health-probe target whose answer a test can change.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class Seen:
    """What the upstream saw of one request."""

    model: str
    headers: dict[str, str]
    body: dict[str, Any]
    completed: bool = False
    disconnected: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    #: The path the request was sent to.
    path: str = ""
    #: The router's side of the connection it came on (its port tells connections apart).
    client_port: int = 0


def usage(prompt: int = 3, completion_tokens: int = 3) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion_tokens, "total_tokens": prompt + completion_tokens}


def completion(model: str, text: str, prompt_tokens: int = 3) -> dict[str, Any]:
    return {
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": usage(prompt_tokens),
    }


def chunk(model: str, content: str | None, finish: str | None = None, prompt_tokens: int | None = None) -> str:
    """One SSE chunk; the final one (``prompt_tokens`` given) carries ``usage`` as OpenAI's does."""
    delta = {"content": content} if content is not None else {}
    payload: dict[str, Any] = {
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if prompt_tokens is not None:
        payload["usage"] = usage(prompt_tokens)
    return json.dumps(payload)


def sse_bytes(model: str, words: list[str], prompt_tokens: int = 3) -> list[bytes]:
    """The exact SSE frames a streaming ``ok`` sends (for byte-exact assertions)."""
    frames = [f"data: {chunk(model, word)}\n\n".encode() for word in words]
    frames.append(f"data: {chunk(model, None, 'stop', prompt_tokens)}\n\n".encode())
    frames.append(b"data: [DONE]\n\n")
    return frames


UTF8_FRAMES = [
    b'data: {"choices":[{"index":0,"delta":{"content":"\xe4\xbd',  # "你" cut after two of its bytes
    b'\xa0\xe5\xa5\xbd"}}]}\n\n',
    b"data: [DONE]\n\n",
]


class MockUpstream:
    """The fake upstream app plus its request records."""

    def __init__(self) -> None:
        self.seen: dict[str, Seen] = {}
        self.all_seen: dict[str, list[Seen]] = {}
        self.hits: dict[str, int] = {}
        self.health_status: dict[str, int] = {}
        self.health_hits: dict[str, int] = {}
        #: Requests being answered right now, and the most ever at once (until reset by a test).
        self.in_flight = 0
        self.peak_in_flight = 0
        self._lock = threading.Lock()
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                # A custom route's upstream path (``routes = [..., "/llm/chat/completions"]``).
                Route("/v1/llm/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/v1/health/{tag}", self.health, methods=["GET"]),
            ]
        )

    def record(self, request_id: str, timeout: float = 5.0) -> Seen:
        """The record for ``request_id``, waiting until the upstream has finished with it."""
        deadline = time.monotonic() + timeout
        while request_id not in self.seen:
            if time.monotonic() > deadline:
                raise AssertionError(f"upstream never saw request {request_id}")
            time.sleep(0.005)
        seen = self.seen[request_id]
        if not seen.done.wait(timeout):
            raise AssertionError(f"upstream never finished request {request_id}")
        return seen

    def attempts(self, request_id: str) -> list[str]:
        """The model ids this upstream was asked for under ``request_id``, in order."""
        return [seen.model for seen in self.all_seen.get(request_id, [])]

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "ok", "object": "model", "owned_by": "mock"}]})

    async def health(self, request: Request) -> Response:
        tag = request.path_params["tag"]
        with self._lock:
            self.health_hits[tag] = self.health_hits.get(tag, 0) + 1
        status = self.health_status.get(tag, 200)
        return JSONResponse({"status": status}, status_code=status)

    async def chat(self, request: Request) -> Response:
        body = await request.json()
        model = str(body.get("model"))
        request_id = request.headers.get("x-request-id", f"anon-{id(request)}")
        client = request.scope.get("client")
        seen = Seen(model, dict(request.headers), body, path=request.url.path, client_port=client[1] if client else 0)
        with self._lock:
            self.seen[request_id] = seen
            self.all_seen.setdefault(request_id, []).append(seen)
            self.hits[model] = self.hits.get(model, 0) + 1
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        stream = body.get("stream") is True
        try:
            response = await self._scenario(request, model, stream, seen)
        except BaseException:
            seen.disconnected = True
            seen.done.set()
            raise
        finally:
            with self._lock:
                self.in_flight -= 1
        if not isinstance(response, (StreamingResponse, EventSourceResponse)):
            seen.completed = True
            seen.done.set()
        return response

    @staticmethod
    async def _status(spec: str) -> Response:
        code, *options = spec.split("-")
        headers: dict[str, str] = {}
        message = f"mock says {code}"
        for option in options:
            if option.startswith("ra"):
                headers["retry-after"] = option[2:]
            elif option.startswith("reset"):
                headers["x-ratelimit-reset-requests"] = f"{option[5:]}s"
                headers["x-ratelimit-remaining-requests"] = "0"
            elif option.startswith("in"):
                message += f"; please try again in {option[2:]}s."
            elif option.startswith("rid"):
                headers["x-request-id"] = f"req_{option[3:]}"
            elif option.startswith("d") and option[1:].isdigit():
                await asyncio.sleep(int(option[1:]) / 1000)
        return JSONResponse(
            {"error": {"message": message, "type": "mock_error", "code": code}},
            status_code=int(code),
            headers=headers,
        )

    async def _scenario(self, request: Request, model: str, stream: bool, seen: Seen) -> Response:
        name, _, arg = model.partition("-")
        if name == "status":
            return await self._status(arg)
        if name == "fail":
            count, _, rest = arg.partition("-")
            spec = rest.partition("-")[2]
            if self.hits[model] <= int(count):
                return await self._status(spec)
        if name == "tabhint":  # a hint whose number and unit are parted by a tab, in plain text
            return PlainTextResponse("Too many requests: retry in 2\tseconds", status_code=429)
        if name == "quota":  # OpenAI's "out of credit" answer: a 429 that is really billing
            return JSONResponse(
                {
                    "error": {
                        "message": "You exceeded your current quota, please check your plan and billing details.",
                        "type": "insufficient_quota",
                        "param": None,
                        "code": "insufficient_quota",
                    }
                },
                status_code=429,
            )
        if name == "ctx" and arg == "anthropic":
            return JSONResponse(
                {
                    "type": "error",
                    "error": {
                        "type": "invalid_request_error",
                        "message": "prompt is too long: 210000 tokens > 200000 maximum",
                    },
                },
                status_code=400,
            )
        if name == "ctx":
            return JSONResponse(
                {
                    "error": {
                        "message": "This model's maximum context length is 8192 tokens. However, your messages "
                        "resulted in 9000 tokens. Please reduce the length of the messages.",
                        "type": "invalid_request_error",
                        "param": "messages",
                        "code": "context_length_exceeded",
                    }
                },
                status_code=400,
            )
        if name == "hang":
            await self._wait_for_disconnect(request, seen)
        if name == "slow":
            await self._sleep_unless_disconnected(request, seen, int(arg) / 1000)
        prompt_tokens = int(arg) if name == "usage" else 3
        if name == "echo":
            return JSONResponse({"headers": seen.headers, "body": seen.body})
        if name == "headers":
            return JSONResponse(
                completion(model, "with headers"),
                headers={
                    "set-cookie": "upstream=1",
                    "keep-alive": "timeout=5",
                    "x-upstream": "kept",
                    "x-router-route": "forged",
                    "x-router-degraded": "1",
                    "x-router-model": "forged/model",
                },
            )
        if name == "big":
            return JSONResponse(completion(model, "x" * (int(arg) * 1024)))
        if name == "empty":
            return Response(b"", media_type="application/json")
        if name in ("silent", "break", "stall", "utf8", "trickle"):
            return StreamingResponse(self._raw(name, arg, model, request, seen), media_type="text/event-stream")
        ids = {"rid": {"x-request-id": f"req_{arg}"}, "anthrid": {"request-id": f"req_{arg}"}}
        ids["badrid"] = {"x-request-id": "req 1; not a token"}
        headers = ids.get(name)
        if stream:
            return EventSourceResponse(self._events(model, seen, prompt_tokens), sep="\n", ping=600, headers=headers)
        return JSONResponse(completion(model, f"hello from {model}", prompt_tokens), headers=headers)

    async def _sleep_unless_disconnected(self, request: Request, seen: Seen, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if await request.is_disconnected():
                seen.disconnected = True
                seen.done.set()
                raise asyncio.CancelledError
            await asyncio.sleep(0.01)

    async def _wait_for_disconnect(self, request: Request, seen: Seen) -> None:
        while not await request.is_disconnected():
            await asyncio.sleep(0.01)
        seen.disconnected = True
        seen.done.set()
        raise asyncio.CancelledError

    async def _events(self, model: str, seen: Seen, prompt_tokens: int) -> AsyncIterator[dict[str, str]]:
        try:
            for word in ["Hello", " from", f" {model}"]:
                yield {"data": chunk(model, word)}
            yield {"data": chunk(model, None, "stop", prompt_tokens)}
            yield {"data": "[DONE]"}
            seen.completed = True
        except BaseException:
            seen.disconnected = True
            raise
        finally:
            seen.done.set()

    async def _raw(self, name: str, arg: str, model: str, request: Request, seen: Seen) -> AsyncIterator[bytes]:
        try:
            if name == "silent":
                await self._wait_for_disconnect(request, seen)
            if name == "utf8":
                for frame in UTF8_FRAMES:
                    yield frame
                    await asyncio.sleep(0.05)
                seen.completed = True
                return
            count = int(arg)
            for index in range(count):
                yield f"data: {chunk(model, f'w{index} ')}\n\n".encode()
                await asyncio.sleep(0.02 if name == "trickle" else 0.01)
            if name == "trickle":
                yield b"data: [DONE]\n\n"
                seen.completed = True
                return
            if name == "stall":
                await self._wait_for_disconnect(request, seen)
            raise ConnectionAbortedError("mock upstream drops the connection mid-stream")
        except BaseException:
            seen.disconnected = seen.disconnected or not seen.completed
            raise
        finally:
            seen.done.set()
