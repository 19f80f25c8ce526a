"""Every example in README.rst and the docs site loads: the documentation cannot drift from the code.

The examples are read from README.rst (``.. code-block::``) and from every page of the site
(``docs/*.md`` fenced blocks), in that order, the pages in the order of ``mkdocs.yml``'s ``nav``.
The docs state how their examples fit together, and this module holds them to that:

* a TOML example without ``[providers.*]`` is a fragment: it loads on top of the nearest
  providers block above it (Routing's "the providers the examples assume");
* Python examples run in order in one namespace (``PROVIDERS`` is defined once), with
  ``router.toml`` (the Getting started file, which the README's quick start repeats) in the
  working directory and ``app`` a fresh host app; examples that only talk to a running server
  (the ``openai`` or ``anthropic`` client) are compiled, not run;
* inbound auth is required (issue 5), so every example must also *mount*: each TOML example and
  each ``settings`` builds a ``ModelRouter``, and each ``app`` gets its middleware stack built.
  The fragments of the Routing and Resilience pages, and examples that say so, take inbound auth
  from ``ASGI_ROUTER_API_KEYS`` (Getting started); every other example must start without it.
  ``os.environ["..."]`` names the examples read are set to made-up keys;
* the ``sh`` blocks of ``export ASGI_ROUTER_...`` lines configure a working router on their own.

On top of the examples, the docs must name what the code has: every settings field (the
configuration reference is generated from the models, ``docs/hooks/config_reference.py``), every
``Reason``, every ``ModelRouter`` keyword, every error the router produces (in the errors page's
table), every strategy (with a TOML example).
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import re
import shlex
import textwrap
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.types import Message

import asgi_router
from asgi_router import ModelRouter, Reason, RouterSettings
from asgi_router.assembly import RouterKeywords

from .docs_site import config_reference

_ROOT = Path(__file__).resolve().parents[2]
_README = _ROOT / "README.rst"
_DOCS = _ROOT / "docs"
_DIRECTIVE = re.compile(r"^(?P<indent> *)\.\. code-block:: (?P<language>\S+)\s*$")
_FENCE = re.compile(r"^```\s*(?P<language>[\w-]*)\s*$")
_NAV_PAGE = re.compile(r"^\s*-\s*(?:[^:]+:\s*)?(?P<page>[\w./-]+\.md)\s*$", re.MULTILINE)
_ENV_READ = re.compile(r"""os\.environ\["([A-Za-z_][A-Za-z0-9_]*)"\]""")
# Inbound auth from the environment is given only where the docs say so: to the fragments of
# these pages, and to examples that name the variable. Every other example must start on its own.
_ENV_AUTH_SECTIONS = frozenset({"routing.md", "resilience.md", "protocols.md"})
_ENV_AUTH = "ASGI_ROUTER_API_KEYS"
_INBOUND_KEYS = '["docs-example-inbound-key-0123456789"]'


def _pages() -> list[Path]:
    """The site's pages in the order of ``mkdocs.yml``'s ``nav``."""
    nav = (_ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    return [_DOCS / found["page"] for found in _NAV_PAGE.finditer(nav)]


_SOURCES = [_README, *_pages()]


@dataclass(frozen=True)
class Block:
    language: str
    text: str
    line: int
    #: The file the block is in, relative to the repository.
    source: str
    #: README.rst: the top-level section the block is in; a docs page: the page's file name.
    section: str
    #: Position among every block of the README and the pages, in reading order.
    order: int

    @property
    def id(self) -> str:
        return f"{self.language}@{self.source}:{self.line}"


def _rst_blocks(path: Path) -> list[tuple[str, str, int, str]]:
    """Every ``.. code-block::`` of an RST file, dedented, at any indentation."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[tuple[str, str, int, str]] = []
    section = ""
    for number, line in enumerate(lines):
        underline = lines[number + 1] if number + 1 < len(lines) else ""
        if line.strip() and underline == "-" * len(line):
            section = line
        found = _DIRECTIVE.match(line)
        if found is None:
            continue
        indent = len(found["indent"])
        body: list[str] = []
        for following in lines[number + 1 :]:
            if following.strip() and len(following) - len(following.lstrip(" ")) <= indent:
                break
            body.append(following)
        text = textwrap.dedent("\n".join(body)).strip("\n") + "\n"
        blocks.append((found["language"], text, number + 1, section))
    return blocks


def _markdown_blocks(path: Path) -> list[tuple[str, str, int, str]]:
    """Every fenced block of a Markdown page."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[tuple[str, str, int, str]] = []
    opened: tuple[str, int] | None = None
    body: list[str] = []
    for number, line in enumerate(lines):
        fence = _FENCE.match(line)
        if opened is None and fence is not None:
            opened, body = (fence["language"] or "text", number + 1), []
        elif opened is not None and line.strip() == "```":
            blocks.append((opened[0], "\n".join(body).strip("\n") + "\n", opened[1], path.name))
            opened = None
        elif opened is not None:
            body.append(line)
    assert opened is None, f"{path.name}:{opened[1]}: a fence that is never closed"
    return blocks


def _read_blocks() -> list[Block]:
    blocks: list[Block] = []
    for path in _SOURCES:
        found = _rst_blocks(path) if path.suffix == ".rst" else _markdown_blocks(path)
        source = str(path.relative_to(_ROOT))
        blocks += [
            Block(language, text, line, source, section, len(blocks) + index)
            for index, (language, text, line, section) in enumerate(found)
        ]
    return blocks


_BLOCKS = _read_blocks()


def _blocks(language: str) -> list[Block]:
    return [block for block in _BLOCKS if block.language == language]


def _docs_text() -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in _SOURCES)


def _toml_with_providers(block: Block) -> str:
    """The block itself, or a fragment followed by the nearest providers block above it."""
    if "[providers." in block.text:
        return block.text
    above = [b for b in _blocks("toml") if b.order < block.order and "[providers." in b.text]
    assert above, f"{block.id}: a TOML fragment with no providers block above it"
    # the providers go after the fragment: its top-level keys must come before any [table]
    return block.text + "\n" + above[-1].text


def _quick_start_file() -> Block:
    """The tutorial's ``router.toml``; the README's quick start repeats it word for word."""
    files = [b for b in _blocks("toml") if b.text.startswith("# router.toml")]
    [tutorial] = [b for b in files if b.source == "docs/getting-started.md"]
    assert all(b.text == tutorial.text for b in files), [b.id for b in files]
    return tutorial


def _is_env_block(block: Block) -> bool:
    lines = [line for line in block.text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return bool(lines) and all(line.startswith("export ASGI_ROUTER_") for line in lines)


def _host_app() -> Starlette:
    return Starlette()


@pytest.fixture(autouse=True)
def _clean_router_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("ASGI_ROUTER_"):
            monkeypatch.delenv(name)
    # what the examples read with os.environ["..."]: made-up keys, distinct and long enough
    for index, name in enumerate(sorted(set(_ENV_READ.findall(_docs_text())))):
        monkeypatch.setenv(name, f"docs-example-key-{index:02d}-0123456789")


def _inbound_auth_for(block: Block, monkeypatch: pytest.MonkeyPatch) -> None:
    if block.section in _ENV_AUTH_SECTIONS or _ENV_AUTH in block.text:
        monkeypatch.setenv(_ENV_AUTH, _INBOUND_KEYS)
    else:
        monkeypatch.delenv(_ENV_AUTH, raising=False)


# --- the examples ---------------------------------------------------------------------------


def test_the_docs_have_examples_in_every_spelling() -> None:
    assert len(_blocks("toml")) >= 15
    assert len(_blocks("python")) >= 15
    assert any(_is_env_block(block) for block in _blocks("sh"))


@pytest.mark.parametrize("block", _blocks("toml"), ids=lambda block: block.id)
def test_toml_example_loads_and_mounts(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "router.toml"
    path.write_text(_toml_with_providers(block), encoding="utf-8")
    _inbound_auth_for(block, monkeypatch)
    settings = RouterSettings.from_toml(path)
    assert settings.providers
    router = ModelRouter(_host_app(), config=path)  # ConfigError if it could not start
    assert router.settings == settings


@pytest.fixture
def _logging_restored() -> Iterator[None]:
    """Examples configure logging (a root handler, the router's logger at INFO) as an app would:
    undone afterwards, so that no other test runs with it."""
    root, router = logging.getLogger(), logging.getLogger("asgi_router")
    handlers, root_level, router_level = list(root.handlers), root.level, router.level
    yield
    for handler in root.handlers:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(root_level)
    router.setLevel(router_level)


@pytest.mark.usefixtures("_logging_restored")
def test_python_examples_run_build_settings_and_mount(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "router.toml").write_text(_quick_start_file().text, encoding="utf-8")
    namespace: dict[str, object] = {}
    ran = settings_built = apps_built = 0
    for block in _blocks("python"):
        code = compile(block.text, block.id, "exec")
        if re.search(r"^(?:import (?:openai|anthropic)|from (?:openai|anthropic) import)", block.text, re.MULTILINE):
            continue  # a client of a running server: compiled above, not run
        _inbound_auth_for(block, monkeypatch)
        for name in ("settings", "router"):
            namespace.pop(name, None)
        namespace["app"] = _host_app()
        exec(code, namespace)
        ran += 1
        settings = namespace.get("settings")
        if settings is not None:
            assert isinstance(settings, RouterSettings), block.id
            ModelRouter(_host_app(), settings=settings)
            settings_built += 1
        app = namespace["app"]
        assert isinstance(app, Starlette), block.id
        if app.user_middleware:
            app.build_middleware_stack()  # constructs the ModelRouter(s) the example mounted
            apps_built += 1
        if "router" in namespace:
            assert isinstance(namespace["router"], ModelRouter), block.id
    assert ran >= 12
    assert settings_built >= 9
    assert apps_built >= 4


@pytest.mark.parametrize("block", [b for b in _blocks("sh") if _is_env_block(b)], ids=lambda block: block.id)
def test_environment_example_configures_a_router(block: Block, monkeypatch: pytest.MonkeyPatch) -> None:
    for line in block.text.splitlines():
        if line.startswith("export "):
            name, _, value = shlex.split(line)[1].partition("=")
            monkeypatch.setenv(name, value)
    router = ModelRouter(_host_app())  # neither settings= nor config=: the environment alone
    assert router.settings.providers


@pytest.mark.parametrize("block", _blocks("json"), ids=lambda block: block.id)
def test_json_example_is_json(block: Block) -> None:
    json.loads(block.text)


# --- the docs name what the code has -------------------------------------------------------


def _config_reference() -> str:
    """The configuration reference page as the site shows it: generated from the models."""
    rendered: str = config_reference().render()
    return rendered


def _literal_names(text: str) -> set[str]:
    """Inline literals: ``x`` in reStructuredText, `x` (or ``x``) in Markdown, outside code blocks."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return {found[2].strip() for found in re.finditer(r"(`+)(.+?)\1", prose)}


def _documented() -> set[str]:
    names = _literal_names(_docs_text() + "\n" + _config_reference())
    # "`backoff.base`" documents field `base` of `backoff`; "`images`, `tools`" both
    return names | {name.rsplit(".", 1)[-1] for name in names}


_SETTINGS_MODELS: list[type[BaseModel]] = [
    getattr(asgi_router, name)
    for name in asgi_router.__all__
    if inspect.isclass(getattr(asgi_router, name)) and issubclass(getattr(asgi_router, name), BaseModel)
]


@pytest.mark.parametrize("model", _SETTINGS_MODELS, ids=lambda model: model.__name__)
def test_configuration_reference_names_every_field(model: type[BaseModel]) -> None:
    missing = set(model.model_fields) - _documented()
    assert not missing, f"the docs do not document {model.__name__} fields {sorted(missing)}"


def test_every_reason_is_documented() -> None:
    missing = set(typing.get_args(Reason)) - _documented()
    assert not missing, sorted(missing)


def test_every_model_router_keyword_is_documented() -> None:
    missing = set(RouterKeywords.__optional_keys__) - _documented()
    assert not missing, sorted(missing)


def test_every_strategy_has_a_toml_example() -> None:
    strategies = typing.get_args(asgi_router.GroupSettings.model_fields["strategy"].annotation)
    assert len(strategies) >= 7
    for strategy in strategies:
        assert any(f'strategy = "{strategy}"' in block.text for block in _blocks("toml")), strategy


_PRODUCED = re.compile(r"(?:RouterError|ResolveError|error_body)\(\s*(\d{3}),\s*\"([a-z_]+)\"")
_TABLE_ROW = re.compile(r"^\| (\d{3}) \| `([a-z_]+)` \|", re.MULTILINE)
_ERRORS_PAGE = _DOCS / "errors-and-headers.md"


def test_the_error_table_lists_every_error_the_router_produces() -> None:
    produced = {
        (int(status), code)
        for module in (_ROOT / "asgi_router").rglob("*.py")
        for status, code in _PRODUCED.findall(module.read_text(encoding="utf-8"))
    }
    assert len(produced) >= 15  # the pattern still finds them
    table = _TABLE_ROW.findall(_ERRORS_PAGE.read_text(encoding="utf-8"))
    documented = {(int(status), code) for status, code in table}
    missing = produced - documented
    assert not missing, sorted(missing)


def test_the_home_page_links_every_page_of_the_site() -> None:
    linked = set(re.findall(r"\]\(([\w-]+\.md)[#)]", (_DOCS / "index.md").read_text(encoding="utf-8")))
    missing = {page.name for page in _pages()} - {"index.md"} - linked
    assert not missing, f"docs/index.md's list does not link {sorted(missing)}"


def test_the_readme_lists_every_page_of_the_site() -> None:
    listed = set(re.findall(r"<docs/([\w-]+\.md)[#>]", _README.read_text(encoding="utf-8")))
    missing = {page.name for page in _pages()} - {"index.md"} - listed
    assert not missing, f"README.rst's Documentation list does not link {sorted(missing)}"


def test_every_markdown_table_starts_with_its_header_and_separator() -> None:
    # Rows cut off from their header by a paragraph render as a line of text with bars in it.
    cut = []
    for page in _pages():
        lines = page.read_text(encoding="utf-8").splitlines()
        for at, line in enumerate(lines):
            starts = line.startswith("|") and (at == 0 or not lines[at - 1].startswith("|"))
            if starts and not (at + 1 < len(lines) and re.fullmatch(r"\|(?: *:?-+:? *\|)+", lines[at + 1])):
                cut.append(f"{page.name}:{at + 1}")
    assert not cut, f"table rows with no header row and separator above them: {cut}"


def test_install_lines_name_a_checkout_the_package_is_on_no_index() -> None:
    assert 'pip install "asgi-router[' not in _docs_text()


@pytest.mark.anyio
async def test_the_cors_example_answers_a_browsers_preflight_for_a_post(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "router.toml").write_text(_quick_start_file().text, encoding="utf-8")
    [block] = [b for b in _blocks("python") if "CORSMiddleware" in b.text and b.source == "docs/deployment.md"]
    _inbound_auth_for(block, monkeypatch)
    namespace: dict[str, object] = {"app": _host_app()}
    exec(compile(block.text, block.id, "exec"), namespace)
    app = namespace["app"]
    assert isinstance(app, Starlette)
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    headers = [
        (b"origin", b"https://app.example"),
        (b"access-control-request-method", b"POST"),
        (b"access-control-request-headers", b"authorization,content-type"),
    ]
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "OPTIONS", "scheme": "http",
        "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions", "root_path": "", "query_string": b"",
        "headers": headers, "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
    }  # fmt: skip
    await app(scope, receive, send)
    assert sent[0]["status"] == 200
    allowed = dict(sent[0]["headers"])[b"access-control-allow-methods"]
    assert b"POST" in allowed
