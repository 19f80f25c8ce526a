"""Inbound auth as configuration: exactly one of ``authorize``, ``api_keys`` or ``allow_unauthenticated``.

The router is a middleware: it runs before the host app's own auth, so without a lock of its
own anyone who can reach it would spend the providers' keys. Settings therefore refuse to be
built until inbound auth is chosen, exactly once, and the refusal lists the choices
(:data:`NO_INBOUND_AUTH`). Inbound keys are checked here too: long enough that guessing is
hopeless, printable ASCII (they travel in a header), no key listed twice.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from typing import Any, Final

from pydantic import SecretStr
from starlette.datastructures import Headers
from starlette.types import Scope

from asgi_router.core.refs import is_valid_name

__all__ = [
    "MIN_INBOUND_KEY_LENGTH",
    "NO_INBOUND_AUTH",
    "ApiKeys",
    "Authorize",
    "check_api_keys",
    "check_inbound_auth",
    "keys_variable",
    "split_api_keys",
]

#: Shortest inbound API key accepted: constant-time comparison does not help a guessable key.
MIN_INBOUND_KEY_LENGTH: Final = 16

#: The host app's check: ``(scope, headers) -> bool | principal``, or an awaitable of that.
Authorize = Callable[[Scope, Headers], object | Awaitable[object]]

#: Inbound keys: a list, or a mapping ``name -> key`` whose names become principals.
ApiKeys = list[SecretStr] | dict[str, SecretStr]

#: Why settings without inbound auth are refused, and the choices.
NO_INBOUND_AUTH: Final = (
    "inbound auth is required: the router is a middleware and runs before the host app's own "
    "auth, so anyone who can reach it would spend the providers' keys. Choose exactly one of: "
    "authorize=<callable (scope, headers) -> bool | principal, or its import string "
    "'package.module:function' (TOML, or ASGI_ROUTER_AUTHORIZE)>; "
    "api_keys=[...] (or ASGI_ROUTER_API_KEYS=key1,key2); "
    "allow_unauthenticated=True (development only). "
    "ModelRouter(app, authorize=fn) supplies authorize= when the router builds the settings "
    "itself (from config= or the environment); settings you build yourself take "
    "RouterSettings(authorize=fn)."
)


def split_api_keys(value: Any) -> Any:
    """``api_keys`` as the environment gives it (a string): JSON, or keys separated by commas.

    A key never holds a space; a key with a comma in it takes the JSON form. Anything that is
    not a string is returned as it is, for the field's own validation.
    """
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith(("[", "{")):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:  # its message gives a position, never the text
            raise ValueError(f"api_keys is neither JSON nor comma-separated keys ({exc.msg})") from None
    return [key.strip() for key in text.split(",") if key.strip()]


def check_api_keys(value: ApiKeys | None, field: str = "api_keys") -> ApiKeys | None:
    """Refuse an empty list, a bad principal name, a short, non-ASCII or repeated key (``field``:
    the setting's name in the refusal: ``admin_keys`` are checked alike)."""
    if value is None:
        return None
    if not value:
        raise ValueError(f"{field} is empty; list at least one key, or leave it out")
    keys = list(value.values()) if isinstance(value, dict) else value
    for name in value if isinstance(value, dict) else ():
        if not is_valid_name(name):
            raise ValueError(f"{field}.{name}: names are letters, digits, '_', '.', '-'")
    for index, key in enumerate(keys):
        secret = key.get_secret_value()
        if len(secret) < MIN_INBOUND_KEY_LENGTH:
            raise ValueError(f"{field}[{index}] is shorter than {MIN_INBOUND_KEY_LENGTH} characters")
        if any(not (33 <= ord(ch) < 127) for ch in secret):
            raise ValueError(f"{field}[{index}] must be printable ASCII without spaces (it travels in a header)")
    if len({key.get_secret_value() for key in keys}) != len(keys):
        raise ValueError(f"{field} lists the same key twice")
    return value


def keys_variable(api_keys: ApiKeys | None, name: str) -> str | None:
    """The environment variable (``name``, in any case) that ``api_keys`` came from, if they
    did: it is set and holds these very keys. Settings built with keywords name it so in their
    refusals too (the keyword would have won, had one been given)."""
    if api_keys is None:
        return None
    variable = next((found for found in os.environ if found.upper() == name.upper()), None)
    if variable is None:
        return None
    try:
        given = split_api_keys(os.environ[variable])
    except ValueError:
        return None
    keys = api_keys.values() if isinstance(api_keys, dict) else api_keys
    secrets = [key.get_secret_value() for key in keys]
    listed = list(given.values()) if isinstance(given, dict) else given
    return variable if listed == secrets else None


def check_inbound_auth(
    *, authorize: bool, api_keys: bool, allow_unauthenticated: bool, virtual_keys: bool = False
) -> None:
    """Refuse settings that chose inbound auth not exactly once (each flag: that choice is set);
    with ``virtual_keys`` (``admin_keys`` set: keys issued at runtime), none chosen is enough."""
    chosen = [
        name
        for name, on in (
            ("authorize=", authorize),
            ("api_keys", api_keys),
            ("allow_unauthenticated=True", allow_unauthenticated),
        )
        if on
    ]
    if not chosen:
        if virtual_keys:
            return
        raise ValueError(NO_INBOUND_AUTH)
    if chosen == ["api_keys", "allow_unauthenticated=True"]:
        raise ValueError("allow_unauthenticated=True contradicts api_keys; choose one")
    if len(chosen) > 1:
        raise ValueError(f"inbound auth is configured twice ({' and '.join(chosen)}); choose one")
