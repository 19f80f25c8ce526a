"""The client's side of a request, before any upstream is chosen.

Inbound auth (``auth.py``), the header screen (``screen.py``), the bounded body read and parse
(``body.py``, ``safejson.py``), routes matched below ``root_path`` (``mounting.py``) and the
listener that notices a client leaving (``disconnect.py``).
"""
