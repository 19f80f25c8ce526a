"""The admin API and page on ``admin_route``: keys issued and revoked, spend read, at runtime.

Mounted only when ``admin_keys`` is set; every route but the page needs an admin key
(``admin_door.py``), and admin keys open nothing else. Under ``{admin_route}``:

=========================  ===============================================================
``GET /``                  the page (``admin_page.py``): it asks for an admin key itself
``POST /keys``             a new key: 201 with the key and its ``secret`` (shown this once)
``GET /keys``              ``{"data": [keys]}``
``GET /keys/{id}``         the key
``PATCH /keys/{id}``       the fields given changed; the key
``DELETE /keys/{id}``      the key revoked for good: 204
``POST /keys/{id}/rotate`` a new ``secret`` (``{"grace": seconds}``: the old one still opens
                           that long, default 0); 200 with the key and the secret
``GET /spend``             spend grouped (``admin_spend.py``): JSON, or CSV for ``text/csv``
=========================  ===============================================================

Errors are OpenAI's shape (``{"error": {"message", "type", "code", "param"}}``, ``param`` naming
the field at fault): 400 for a body that is not a JSON object or names an unknown field, 422 for
a bad value, 404 for an unknown id or route, 405 for a method a route does not take, 409 for a
key name its caller already has, 401 without an admin key, 429 for an address locked out. No
answer ever holds a secret but the one a create or a rotation just made.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Final, TypeVar

from starlette.types import Receive, Scope, Send

from asgi_router.core.router_errors import ERROR_TYPES, RouterError
from asgi_router.endpoints.admin_door import AdminDoor
from asgi_router.endpoints.admin_page import ADMIN_PAGE, ADMIN_PAGE_POLICY
from asgi_router.endpoints.admin_spend import SpendQuery, as_csv, spend_request
from asgi_router.inbound.body import ClientGone, read_body
from asgi_router.inbound.mounting import route_path
from asgi_router.keys.key_input import InputProblem, KeyChanges, KeyRequest, parse_input
from asgi_router.keys.key_operations import KeyOperations
from asgi_router.keys.key_table import DuplicateName
from asgi_router.keys.virtual_key import VirtualKey
from asgi_router.observability.events import logger

__all__ = ["AdminApi"]

#: The largest admin request body (a key with 4 KiB of metadata fits many times over).
_MOST_BODY: Final = 64 * 1024
_BODY_SECONDS: Final = 10.0
_HEADERS: Final = ((b"cache-control", b"no-store"), (b"x-content-type-options", b"nosniff"))

Reply = tuple[int, bytes, bytes]  # status, content type, body


def _json(status: int, value: object) -> Reply:
    return status, b"application/json", json.dumps(value, separators=(",", ":")).encode()


def _error(status: int, code: str, message: str, param: str | None = None) -> Reply:
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return _json(status, {"error": {"message": message, "type": kind, "code": code, "param": param}})


def _problem(problem: InputProblem) -> Reply:
    return _error(
        problem.status, "invalid_request" if problem.status == 400 else "invalid_value", problem.message, problem.field
    )


def _from(error: RouterError) -> Reply:
    return _error(error.status, error.code, error.message)


_NOT_FOUND: Final = _error(404, "not_found", "no such admin route")
_NO_KEY: Final = _error(404, "key_not_found", "no key has this id")
_DUPLICATE_NAME: Final = _error(409, "duplicate_key_name", "this caller already has a key of this name", "name")
#: A body the admin API reads (``keys/key_input.py``).
_Input = TypeVar("_Input", KeyRequest, KeyChanges)


def _with_secret(key: VirtualKey, secret: str) -> dict[str, object]:
    shown = key.as_json()
    shown["secret"] = secret
    return shown


class AdminApi:
    """The admin routes under one ``admin_route`` (see the module docstring)."""

    def __init__(
        self,
        route: str,
        door: AdminDoor,
        operations: KeyOperations,
        spend: SpendQuery | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.route = route
        self._prefix = route + "/"
        self._door = door
        self._keys = operations
        self._spend = spend
        self._wall = wall

    def handles(self, path: str) -> bool:
        """Whether ``path`` (below ``root_path``) is an admin route."""
        return path == self.route or path.startswith(self._prefix)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = route_path(scope)
        method = scope["method"]
        headers: tuple[tuple[bytes, bytes], ...] = ()
        try:
            if path in (self.route, self._prefix) and method in ("GET", "HEAD"):
                reply: Reply = 200, b"text/html; charset=utf-8", ADMIN_PAGE
                headers = ((b"content-security-policy", ADMIN_PAGE_POLICY),)
            elif (refused := self._door.refusal(scope)) is not None:
                reply = _from(refused)
                headers = refused.headers
                if refused.retry_after is not None:
                    headers += ((b"retry-after", str(max(1, round(refused.retry_after))).encode()),)
            else:
                reply = await self._route(path[len(self._prefix) :], method, scope, receive)
        except ClientGone:
            return
        except Exception:
            logger.exception("admin request %s %s failed", method, path)
            reply = _error(500, "router_error", "the admin request failed; see the server log")
        status, content_type, body = reply
        start = [(b"content-type", content_type), *_HEADERS, *headers]
        start.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": start})
        await send({"type": "http.response.body", "body": body if method != "HEAD" else b""})

    async def _route(self, rest: str, method: str, scope: Scope, receive: Receive) -> Reply:
        parts = rest.split("/")
        if parts == ["keys"]:
            if method == "GET":
                return _json(200, {"data": [key.as_json() for key in await self._keys.table.every()]})
            if method == "POST":
                return await self._create(scope, receive)
            return _error(405, "method_not_allowed", "keys takes GET and POST")
        if len(parts) == 2 and parts[0] == "keys" and parts[1]:
            return await self._one(parts[1], method, scope, receive)
        if len(parts) == 3 and parts[0] == "keys" and parts[2] == "rotate":
            if method != "POST":
                return _error(405, "method_not_allowed", "rotate takes POST")
            return await self._rotate(parts[1], scope, receive)
        if parts == ["spend"]:
            if method not in ("GET", "HEAD"):
                return _error(405, "method_not_allowed", "spend takes GET")
            return await self._spend_reply(scope)
        return _NOT_FOUND

    async def _body(self, scope: Scope, receive: Receive) -> bytes | Reply:
        body = await read_body(scope, receive, _MOST_BODY, _BODY_SECONDS)
        return _from(body) if isinstance(body, RouterError) else body

    async def _input(self, model: type[_Input], scope: Scope, receive: Receive) -> _Input | Reply:
        """The request's body as ``model``, or the reply that refuses it."""
        body = await self._body(scope, receive)
        if isinstance(body, tuple):
            return body
        parsed = parse_input(model, body)
        return _problem(parsed) if isinstance(parsed, InputProblem) else parsed

    async def _create(self, scope: Scope, receive: Receive) -> Reply:
        request = await self._input(KeyRequest, scope, receive)
        if isinstance(request, tuple):
            return request
        try:
            key, secret = await self._keys.create(request)
        except DuplicateName:
            return _DUPLICATE_NAME
        return _json(201, _with_secret(key, secret))

    async def _one(self, key_id: str, method: str, scope: Scope, receive: Receive) -> Reply:
        if method in ("GET", "HEAD"):
            key = await self._keys.table.get(key_id)
        elif method == "DELETE":
            key = await self._keys.revoke(key_id)
            if key is not None:
                return 204, b"application/json", b""
        elif method == "PATCH":
            changes = await self._input(KeyChanges, scope, receive)
            if isinstance(changes, tuple):
                return changes
            try:
                key = await self._keys.change(key_id, changes)
            except DuplicateName:
                return _DUPLICATE_NAME
            except ValueError as exc:
                return _error(422, "invalid_value", str(exc), "hard_limit")
        else:
            return _error(405, "method_not_allowed", "a key takes GET, PATCH and DELETE")
        return _NO_KEY if key is None else _json(200, key.as_json())

    async def _rotate(self, key_id: str, scope: Scope, receive: Receive) -> Reply:
        body = await self._body(scope, receive)
        if isinstance(body, tuple):
            return body
        try:
            data = json.loads(body) if body.strip() else {}
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "invalid_request", "the body is not JSON")
        if not isinstance(data, dict):
            return _error(400, "invalid_request", "the body must be a JSON object")
        unknown = sorted(set(data) - {"grace"})
        if unknown:
            return _error(400, "invalid_request", f"unknown field {unknown[0]!r}", unknown[0])
        grace = data.get("grace", 0)
        if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 <= grace <= 30 * 86_400:
            return _error(422, "invalid_value", "grace: seconds the old secret still opens, 0 to 2592000", "grace")
        rotated = await self._keys.rotate(key_id, float(grace))
        if rotated is None:
            return _NO_KEY
        return _json(200, _with_secret(*rotated))

    async def _spend_reply(self, scope: Scope) -> Reply:
        asked = spend_request(scope.get("query_string", b""), self._wall())
        if isinstance(asked, InputProblem):
            return _problem(asked)
        if self._spend is None:
            return _error(404, "not_found", "this router keeps no spend")
        by, since, until = asked
        rows = await self._spend(by, since, until)
        accept = next((value for name, value in scope["headers"] if name == b"accept"), b"")
        if b"text/csv" in accept:
            return 200, b"text/csv; charset=utf-8", as_csv(by, rows)
        return _json(200, {"by": by, "rows": [dict(row) for row in rows]})
