"""``python -m asgi_router.testing serve ...``: a scripted fake upstream (``scripted_serve.py``)."""

import sys

from asgi_router.testing.scripted_serve import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
