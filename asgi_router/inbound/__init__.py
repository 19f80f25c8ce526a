"""The client's side of a request, before any upstream is chosen.

Inbound auth (``auth.py``; virtual keys in front of it, ``key_auth.py``), the header screen
(``screen.py``), the session id a caller sends
(``session_id.py``: bounded, kept only as a digest), the bounded body read and parse
(``body.py``, ``safejson.py``), routes matched below ``root_path`` (``mounting.py``) and the
listener that notices a client leaving (``disconnect.py``).
"""
