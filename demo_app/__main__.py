"""``python -m demo_app``: see :mod:`demo_app.cli` and ``python -m demo_app --help``."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
