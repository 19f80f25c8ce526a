"""``python -m asgi_router.cli``: the ``asgi-router`` command without its console script."""

import sys

from asgi_router.cli.main import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
