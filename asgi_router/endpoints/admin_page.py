"""The admin page at ``{admin_route}/``: keys and spend in a browser, one self-contained file.

``admin.html`` (package data) carries its style and script inline and loads nothing else; its
Content-Security-Policy allows exactly those (by hash), requests to this origin and nothing
more. The page holds no data: it asks for an admin key, keeps it in the page's memory only and
sends it as a header with each call to the admin API (never a cookie: no other site can make a
browser send it). Every value it shows is set as text, never as HTML.
"""

from __future__ import annotations

import base64
import hashlib
import re
from importlib.resources import files
from typing import Final

__all__ = ["ADMIN_PAGE", "ADMIN_PAGE_POLICY"]

_TEMPLATE: Final = files("asgi_router.endpoints").joinpath("admin.html").read_text(encoding="utf-8")


def _hashes(tag: str) -> str:
    found = re.findall(rf"<{tag}>(.*?)</{tag}>", _TEMPLATE, re.DOTALL)
    return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()}'" for text in found)


#: The page's bytes.
ADMIN_PAGE: Final = _TEMPLATE.encode()
#: Its Content-Security-Policy: its own script and style, calls to this origin only.
ADMIN_PAGE_POLICY: Final = (
    f"default-src 'none'; script-src {_hashes('script')}; style-src {_hashes('style')}; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
).encode()
