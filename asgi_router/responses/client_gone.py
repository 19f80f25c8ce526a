"""The response a request gets when its client left before the first byte.

The client will never read it, but the server (or a host's outer middleware) is owed one:
Starlette's request/response middleware base class, wrapping the router, raises "No response
returned" and logs an ERROR traceback when the app it wraps returns without starting a response, once per abandoned
request. So a request whose client left before anything was sent ends with a 499 start and an
empty body, as nginx names that case; a server whose client is gone drops it.
"""

from __future__ import annotations

from asgi_router.responses.request_context import RequestContext

__all__ = ["CLIENT_GONE", "close_for_gone_client", "owes_gone_response"]

#: The status of a request whose client left first (nginx's "client closed request").
CLIENT_GONE = 499


def owes_gone_response(context: RequestContext) -> bool:
    """Whether ``context``'s client left before anything was sent (so the 499 is owed). Asked
    first by the caller, so that a request with nothing to close makes no coroutine."""
    return (context.disconnected or context.status == CLIENT_GONE) and not context.response_started


async def close_for_gone_client(context: RequestContext) -> None:
    """Send the 499 start and an empty body if ``context``'s client left before anything was
    sent; nothing otherwise."""
    if not owes_gone_response(context):
        return
    try:
        await context.send_tracked({"type": "http.response.start", "status": CLIENT_GONE, "headers": []})
        await context.send({"type": "http.response.body", "body": b"", "more_body": False})
    except Exception:  # a server or middleware may refuse to write for a client that is gone: fine
        return
