"""The path a route is matched on: the request's path below the app's ``root_path``.

ASGI gives an app mounted under a prefix the *whole* path in ``scope["path"]`` and the prefix
in ``scope["root_path"]``: Starlette's ``Mount("/llm", app=sub)`` hands ``sub`` a request for
``/llm/v1/chat/completions`` with ``root_path`` ``"/llm"``, and ``uvicorn --root-path /api``
does the same for every request. The router's routes (``/v1/chat/completions``, the models
route) are the app's own paths, so they are matched on what lies below ``root_path``, and that
path (never the mount prefix) is what the upstream is sent below its ``base_url``.

Starlette routes the same way (its helper lives in a private module, so this is our own).
"""

from __future__ import annotations

from starlette.types import Scope

__all__ = ["route_path"]


def route_path(scope: Scope) -> str:
    """``scope["path"]`` without its ``root_path`` prefix (as is when it does not start with it:
    some servers give the path below ``root_path`` already)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if not root or not path.startswith(root):
        return path
    rest = path[len(root) :]
    return rest if not rest or rest[0] == "/" else path
