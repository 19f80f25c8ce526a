"""The ``asgi-router`` command: ``check``, ``serve``, ``explain``, ``replay`` and ``spend``.

``main.py`` parses the command line and loads the configuration (a refusal names the key and the
file, and exits 1); each command has a module: ``check.py`` (the groups' plans and rules, as the
router would use them), ``serve.py`` (the router as a standalone gateway on uvicorn),
``explain.py`` (which rule and plan one request would get, and why) and ``replay.py`` (recorded
requests re-resolved with a new configuration: what would route differently), ``spend_table.py``
(the spend the ledger kept, grouped by key, caller, model or day, read from its database
directly) and ``keys.py`` (virtual keys issued, listed, disabled, revoked and rotated in the
ledger, no server needed). None of them sends
anything upstream but ``serve``. This package sits above ``middleware.py``: it uses the router,
nothing in the router uses it.
"""

from asgi_router.cli.main import main

__all__ = ["main"]
