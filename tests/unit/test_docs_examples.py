"""Every configuration example in docs/routing.rst loads: the documentation cannot drift from the code."""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest

from asgi_router import RouterSettings

_DOC = Path(__file__).resolve().parents[2] / "docs" / "routing.rst"
_BLOCK = re.compile(r"^\.\. code-block:: (\w+)\n\n((?:(?:   .*)?\n)+)", re.MULTILINE)


def _blocks(language: str) -> list[str]:
    text = _DOC.read_text(encoding="utf-8")
    return [textwrap.dedent(body) for lang, body in _BLOCK.findall(text) if lang == language]


@pytest.fixture(autouse=True)
def _clean_router_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("ASGI_ROUTER_"):
            monkeypatch.delenv(name)


def test_the_document_has_examples_in_both_spellings() -> None:
    assert len(_blocks("toml")) >= 10
    assert len(_blocks("python")) >= 8


@pytest.mark.parametrize("index", range(len(_blocks("toml"))))
def test_toml_example_loads_with_the_documented_providers(index: int, tmp_path: Path) -> None:
    providers, *_ = _blocks("toml")
    example = _blocks("toml")[index]
    path = tmp_path / "router.toml"
    # the providers go after the example: its top-level keys must come before any [table]
    path.write_text(example if "[providers." in example else example + "\n" + providers, encoding="utf-8")
    settings = RouterSettings.from_toml(path)
    assert set(settings.providers) == {"openai", "groq", "local"}


def test_python_examples_run_and_build_settings() -> None:
    namespace: dict[str, object] = {}
    built = 0
    for block in _blocks("python"):
        if "import openai" in block:  # the client example talks to a running server
            continue
        namespace.pop("settings", None)
        exec(compile(block, str(_DOC), "exec"), namespace)
        if "settings" in namespace:
            assert isinstance(namespace["settings"], RouterSettings)
            built += 1
    assert built >= 6
