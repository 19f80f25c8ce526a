"""The response a request gets when its client left before the first byte.

The client will never read it, but the server (or a host's outer middleware) is owed one:
Starlette's request/response middleware base class, wrapping the router, raises "No response
returned" and logs an ERROR traceback when the app it wraps returns without starting a response, once per abandoned
request. So a request whose client left before anything was sent ends with a 499 start and an
empty body, as nginx names that case; a server whose client is gone drops it.
"""

from __future__ import annotations

from asgi_router.request.request_state import RequestState

__all__ = ["CLIENT_GONE", "close_for_gone_client", "owes_gone_response"]

#: The status of a request whose client left first (nginx's "client closed request").
CLIENT_GONE = 499


def owes_gone_response(state: RequestState) -> bool:
    """Whether ``state``'s client left before anything was sent (so the 499 is owed). Asked
    first by the caller, so that a request with nothing to close makes no coroutine."""
    return (state.disconnected or state.status == CLIENT_GONE) and not state.response_started


async def close_for_gone_client(state: RequestState) -> None:
    """Send the 499 start and an empty body if ``state``'s client left before anything was
    sent; nothing otherwise."""
    if not owes_gone_response(state):
        return
    try:
        await state.send_tracked({"type": "http.response.start", "status": CLIENT_GONE, "headers": []})
        await state.send({"type": "http.response.body", "body": b"", "more_body": False})
    except Exception:  # a server or middleware may refuse to write for a client that is gone: fine
        return
