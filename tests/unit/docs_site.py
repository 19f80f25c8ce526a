"""The docs site's configuration-reference generator, loaded for the tests that check the docs.

It is an mkdocs hook (``docs/hooks/config_reference.py``), not part of the package; the tests
load it from its file, as mkdocs does, once.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

DOCS = Path(__file__).resolve().parents[2] / "docs"


@functools.cache
def config_reference() -> ModuleType:
    name = "asgi_router_docs_config_reference"
    spec = importlib.util.spec_from_file_location(name, DOCS / "hooks" / "config_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up while they are built
    spec.loader.exec_module(module)
    return module
