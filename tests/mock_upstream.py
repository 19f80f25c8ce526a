"""The suite's upstream: the kit's :class:`~asgi_router.testing.FakeUpstream`, scripted by model id.

One server serves every scenario, so a router config names it once (``mock/<scenario>``) and
each test picks behaviour per candidate by the model id it asks for. :class:`MockUpstream` maps
each id onto the kit's replies (``asgi_router.testing.reply``) as the request arrives; what the
kit cannot be scripted to do by id alone (a health-probe target) is answered here too.
Scenarios (``model`` as the upstream receives it):

=====================  ==================================================================
``ok``                 200; JSON ``hello from <model>``, or the kit's stream of the words
                       ``Hello``, `` from``, `` <model>``; usage 3 prompt, 3 completion tokens
``usage-<n>``          like ``ok``, reporting ``prompt_tokens = n``
``ctx-exceeded``       400 ``context_length_exceeded`` (OpenAI's wording and code)
``ctx-anthropic``      400 ``invalid_request_error`` "prompt is too long" (Anthropic's wording)
``quota``              429 ``insufficient_quota`` (OpenAI's "out of credit": really billing)
``status-<code>``      that status with an OpenAI-shaped error body; options may follow, each
                       after a ``-``: ``ra<s>`` (``Retry-After: <s>``), ``in<s>`` ("try again
                       in <s>s." in the message), ``reset<s>`` (``x-ratelimit-reset-requests:
                       <s>s`` with ``x-ratelimit-remaining-requests: 0``), ``d<ms>`` (answer
                       after ``ms`` milliseconds), ``rid<x>`` (``x-request-id: req_<x>``);
                       anything else is ignored (a unique tag)
``tabhint``            429 whose plain-text body reads ``retry in 2<TAB>seconds``
``fail-<n>-<tag>-<st>``  the first ``n`` requests for this exact model id answer as
                       ``status-<st>`` would, every later one as ``ok`` (counted per id)
``hang``               never sends headers (until the client goes away): ``stall``
``silent``             200 headers, then no body byte ever: ``stall_after_headers``
``empty``              200 with an empty body
``break-<n>``          streams n events, then drops the connection (a JSON answer: half its
                       body): ``broken_stream``
``stall-<n>``          streams n events, then goes silent (a JSON answer: headers only)
``utf8``               one SSE event whose UTF-8 character is split across two writes: ``raw``
``slow-<ms>``          like ``ok`` after ``ms`` milliseconds before the first byte (a client
                       that leaves meanwhile is recorded as ``disconnected``): ``slow``
``echo``               200 JSON: the headers and body the upstream received
``headers``            200 JSON with ``Set-Cookie``, ``Keep-Alive`` and ``x-upstream`` headers
``rid-<x>``            like ``ok``, answered with the provider's own ``x-request-id: req_<x>``
``anthrid-<x>``        like ``ok``, with Anthropic's ``request-id: req_<x>`` (no ``x-request-id``)
``badrid``             like ``ok``, with an ``x-request-id`` that is not a sane token
``big-<kb>``           200 JSON body of about ``kb`` KiB
``trickle-<n>``        streams n words, 20 ms apart (for disconnect tests)
=====================  ==================================================================

Any other id answers as ``ok``. Every request is a :class:`~asgi_router.testing.Hit`, found by
its ``x-request-id`` (:meth:`MockUpstream.record`, :meth:`MockUpstream.attempts`).

``GET /v1/health/<tag>`` answers with ``health_status[tag]`` (default 200); ``health_hits``
counts the probes per tag: a health-probe target whose answer a test can change.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, Final

import httpx2

from asgi_router.testing import FakeUpstream, Hit, reply
from asgi_router.testing.reply import Reply

from .waiting import polled

__all__ = ["UTF8_FRAMES", "MockUpstream"]

UTF8_FRAMES: Final = [
    b'data: {"choices":[{"index":0,"delta":{"content":"\xe4\xbd',  # "你" cut after two of its bytes
    b'\xa0\xe5\xa5\xbd"}}]}\n\n',
    b"data: [DONE]\n\n",
]

_FOREVER: Final = 60.0
"""How long the saying-nothing scenarios say nothing: longer than any test waits (the client
leaving ends them at once)."""

_HEALTH: Final = "/v1/health/"

_CTX_OPENAI: Final = {
    "error": {
        "message": "This model's maximum context length is 8192 tokens. However, your messages "
        "resulted in 9000 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
_CTX_ANTHROPIC: Final = {
    "type": "error",
    "error": {"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"},
}
_QUOTA: Final = {
    "error": {
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "type": "insufficient_quota",
        "param": None,
        "code": "insufficient_quota",
    }
}
_FORGED_HEADERS: Final = {
    "set-cookie": "upstream=1",
    "keep-alive": "timeout=5",
    "x-upstream": "kept",
    "x-router-route": "forged",
    "x-router-degraded": "1",
    "x-router-model": "forged/model",
}


def _usage(prompt: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": 3, "total_tokens": prompt + 3}


def _ok(hit: Hit, prompt_tokens: int = 3, headers: dict[str, str] | None = None) -> Reply:
    text = None if hit.stream else f"hello from {hit.model}"
    return reply.ok(text, usage=_usage(prompt_tokens), headers=headers)


def _status(spec: str) -> Reply:
    """``<code>[-option...]``: see the module docstring."""
    code, *options = spec.split("-")
    headers: dict[str, str] = {}
    message = f"mock says {code}"
    delay = 0.0
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
            delay = int(option[1:]) / 1000
    answer = reply.status(
        int(code), body={"error": {"message": message, "type": "mock_error", "code": code}}, headers=headers
    )
    return reply.slow(delay, answer) if delay else answer


class MockUpstream(FakeUpstream):
    """The kit's fake upstream, answering by scenario (the module docstring), and the look-ups
    the suite's tests make by request id and model id."""

    def __init__(self) -> None:
        super().__init__()
        #: What ``GET /v1/health/<tag>`` answers, by tag (200 when unset).
        self.health_status: dict[str, int] = {}

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (without ``/v1``)."""
        return self.base_url.removesuffix("/v1")

    def reply_for(self, hit: Hit) -> Reply:
        if hit.path.startswith(_HEALTH):
            code = self.health_status.get(hit.path.removeprefix(_HEALTH), 200)
            return reply.status(code, body={"status": code})
        if not hit.model:
            return super().reply_for(hit)
        return self._scenario(hit)

    def _scenario(self, hit: Hit) -> Reply:
        name, _, arg = hit.model.partition("-")
        if name == "fail":
            count, _, rest = arg.partition("-")
            if self.count(hit.model) <= int(count):
                return _status(rest.partition("-")[2])
            return _ok(hit)
        fixed: dict[str, Reply] = {
            "tabhint": reply.status(429, body="Too many requests: retry in 2\tseconds"),
            "quota": reply.status(429, body=_QUOTA),
            "hang": reply.stall(_FOREVER),
            "silent": reply.stall_after_headers(_FOREVER),
            "empty": reply.status(200, body=b""),
            "utf8": reply.raw(*UTF8_FRAMES, interval=0.05),
            "echo": reply.status(200, body={"headers": hit.headers, "body": hit.body}),
            "headers": reply.ok("with headers", headers=_FORGED_HEADERS),
            "badrid": _ok(hit, headers={"x-request-id": "req 1; not a token"}),
        }
        if name in fixed:
            return fixed[name]
        if name == "status":
            return _status(arg)
        if name == "ctx":
            return reply.status(400, body=_CTX_ANTHROPIC if arg == "anthropic" else _CTX_OPENAI)
        if name == "slow":
            return reply.slow(int(arg) / 1000, _ok(hit))
        if name == "usage":
            return _ok(hit, prompt_tokens=int(arg))
        if name == "big":
            return reply.ok("x" * (int(arg) * 1024))
        if name == "break":
            return reply.broken_stream(int(arg), interval=0.01)
        if name == "stall":
            return reply.stall_after_headers(_FOREVER, after_chunks=int(arg), interval=0.01)
        if name == "trickle":
            return reply.ok(" ".join(f"w{index}" for index in range(int(arg))), interval=0.02)
        if name == "rid":
            return _ok(hit, headers={"x-request-id": f"req_{arg}"})
        if name == "anthrid":
            return _ok(hit, headers={"request-id": f"req_{arg}"})
        return _ok(hit)

    # --- look-ups ---------------------------------------------------------------------------

    def count(self, model: str) -> int:
        """How many requests asked for ``model``."""
        return sum(1 for hit in self.hits if hit.model == model)

    def counts(self) -> Counter[str]:
        """Requests per model id (to check that a test sent none)."""
        return Counter(hit.model for hit in self.hits if hit.model)

    @property
    def health_hits(self) -> Counter[str]:
        """Health probes received, per tag."""
        return Counter(hit.path.removeprefix(_HEALTH) for hit in self.hits if hit.path.startswith(_HEALTH))

    def seen(self, request_id: str) -> list[Hit]:
        """Every request that came with ``x-request-id: request_id`` (one per attempt), in order."""
        return [hit for hit in self.hits if hit.request_id == request_id]

    def attempts(self, request_id: str) -> list[str]:
        """The model ids this upstream was asked for under ``request_id``, in order."""
        return [hit.model for hit in self.seen(request_id)]

    def record(self, request_id: str, timeout: float = 5.0) -> Hit:
        """The last request under ``request_id``, waiting until the upstream has finished with it."""
        deadline = time.monotonic() + timeout
        seen = polled(lambda: self.seen(request_id), within=timeout, every=0.005, what=f"request {request_id} upstream")
        return seen[-1].wait(max(0.0, deadline - time.monotonic()))

    def answer(self, body: dict[str, Any]) -> bytes:
        """The bytes this upstream answers ``body`` with, asked directly (no router between)."""
        response = httpx2.post(f"{self.base_url}/chat/completions", json=body, timeout=10)
        return response.content
