"""The admin surface's route: ``admin_route``, where keys are issued and spend is read.

The admin API and page are mounted only when ``admin_keys`` is set (``endpoints/admin_api.py``
serves them); ``admin_route`` only says where. It is a path like the router's pages (a leading
``/``, no query, no trailing ``/``: the page is ``{admin_route}/``).
"""

from __future__ import annotations

from typing import Final

__all__ = ["DEFAULT_ADMIN_ROUTE", "check_admin_route"]

#: Where the admin API and page live unless ``admin_route`` says otherwise.
DEFAULT_ADMIN_ROUTE: Final = "/admin"


def check_admin_route(value: str) -> str:
    """A path starting with ``/``, without query, fragment, space or a trailing ``/``."""
    if not value.startswith("/") or value == "/" or value.endswith("/") or any(ch in value for ch in "?# \t\r\n"):
        raise ValueError(
            f"admin_route {value!r} must be a path starting with '/' and not ending with one (no query or space)"
        )
    return value
