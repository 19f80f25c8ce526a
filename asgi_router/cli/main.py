"""``asgi-router``: the command line, and the configuration every command starts from.

A configuration is loaded as the router loads it (the TOML file, under ``ASGI_ROUTER_...``
environment variables), so what ``check`` accepts is what ``serve`` and a host app accept. A
refusal is printed with the file's name and the key, one line per key, and the command exits 1
(2 for a command line that does not parse). ``explain`` and ``replay`` serve nobody, so a
configuration whose inbound keys come from the environment at deployment time (unset here) is
taken as it is for them (and for ``spend``, which reads the ledger directly); ``check`` and
``serve`` insist, as the router will.

An ``authorize = "package.module:function"`` is imported from the working directory, as uvicorn
imports an app.
"""

from __future__ import annotations

import argparse
import os
import sys
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path

from asgi_router.config.auth_settings import NO_INBOUND_AUTH
from asgi_router.config.config_error import ConfigError
from asgi_router.config.settings import RouterSettings

__all__ = ["load_config", "main"]

Command = Callable[[argparse.Namespace], int]


def load_config(path: Path, *, serving: bool) -> RouterSettings:
    """The settings in ``path`` (and the environment); ``serving=False`` does without inbound auth."""
    try:
        return RouterSettings.from_toml(path)
    except ConfigError as refusal:
        if serving or NO_INBOUND_AUTH not in str(refusal):
            raise
        return RouterSettings.from_toml(path, allow_unauthenticated=True)


def _check(args: argparse.Namespace) -> int:
    from asgi_router.cli.check import describe, warnings
    from asgi_router.cli.serve import CONFIG_VARIABLE, RECORD_VARIABLE
    from asgi_router.config.advisories import advisories, stray_environment, unset_key_lines

    ours = (CONFIG_VARIABLE, RECORD_VARIABLE)
    try:
        settings = load_config(args.config, serving=True)
    except ConfigError as refusal:
        # Every mistake at once: the warnings the file would still deserve come with its errors.
        print(f"asgi-router check: {args.config}: {refusal}", file=sys.stderr)
        said = warnings(unset_key_lines(_raw_providers(args.config)) + stray_environment(also=ours))
        if said:
            print("\n".join(said[1:]), file=sys.stderr)
        return 1
    print(describe(settings, args.config, also=ours))
    warned = advisories(settings, also=ours)
    if args.strict and warned:
        count = len(warned)
        print(
            f"asgi-router check --strict: {args.config}: {count} warning{'s' if count != 1 else ''} (listed above)",
            file=sys.stderr,
        )
        return 1
    return 0


def _raw_providers(path: Path) -> object:
    """The file's ``providers`` table as written (nothing when it cannot be read as TOML)."""
    try:
        with path.open("rb") as file:
            return tomllib.load(file).get("providers")
    except (OSError, tomllib.TOMLDecodeError):
        return None


def _serve(args: argparse.Namespace) -> int:
    from asgi_router.cli.serve import serve

    settings = load_config(args.config, serving=True)  # refused here, before any worker starts
    if args.record is not None and args.workers > 1 and "{pid}" not in args.record:
        raise ConfigError(
            f"--record {args.record!r} with --workers {args.workers}: put {{pid}} in the path (e.g. "
            "records-{pid}.jsonl), so that each worker writes a file of its own; replay takes them all"
        )
    return serve(settings, args.config, args.host, args.port, args.workers, args.log_level, args.record)


def _explain(args: argparse.Namespace) -> int:
    from asgi_router.cli.explain import explain

    settings = load_config(args.config, serving=False)
    return explain(settings, args.model, args.header, args.body, sys.stdout)


def _replay(args: argparse.Namespace) -> int:
    from asgi_router.cli.replay import expand, replay

    settings = load_config(args.config, serving=False)
    records = expand(args.records)
    return replay(settings, args.config, records, args.show, args.progress, args.fail_on_change)


def _keys(args: argparse.Namespace) -> int:
    from asgi_router.cli.keys import run_keys

    return run_keys(load_config(args.config, serving=False), args.action, args)


def _spend(args: argparse.Namespace) -> int:
    from asgi_router.cli.spend_table import spend

    settings = load_config(args.config, serving=False)
    return spend(settings, args.by, args.since, args.until, args.csv, sys.stdout)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="asgi-router", description="Check, serve, explain and replay an asgi_router configuration."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run: Command, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        sub.add_argument("config", type=Path, help="the router's TOML configuration")
        sub.set_defaults(run=run)
        return sub

    check = command("check", _check, "validate a configuration and print each group's plan and rules")
    check.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 on any warning too (a provider whose api_key_env is unset, one configured the pre-kind way)",
    )
    serve = command("serve", _serve, "run the router as a standalone gateway on uvicorn")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    serve.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    serve.add_argument(
        "--record",
        metavar="PATH",
        help="append every routed request to PATH as JSON lines (JsonlSink), the input of replay; "
        "{pid} in PATH is the worker's process id (required with --workers above 1)",
    )
    explain = command("explain", _explain, "show which rule and plan a request would get, and why")
    explain.add_argument("model", help="the request's model: group/<id>, provider/model-id or an alias")
    explain.add_argument(
        "--header", action="append", default=[], metavar="NAME=VALUE", help="an inbound header (repeatable)"
    )
    explain.add_argument("--body", type=Path, help="a chat request body (JSON) to take the other facts from")
    replay = command("replay", _replay, "re-resolve recorded requests with this configuration, report differences")
    replay.add_argument(
        "records",
        nargs="+",
        help="JSON-lines files written by JsonlSink (serve --record), or globs such as 'records-*.jsonl'",
    )
    replay.add_argument("--show", type=int, default=20, help="differences listed one by one (default 20)")
    replay.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress bar on stderr (default: for files over 1 MiB when stderr is a terminal)",
    )
    replay.add_argument("--fail-on-change", action="store_true", help="exit 1 when any request routes differently")
    from asgi_router.cli.keys import ACTIONS, add_arguments

    keys = commands.add_parser("keys", help="issue, list and revoke virtual keys in the ledger (no server needed)")
    keys.add_argument("action", choices=ACTIONS)
    keys.add_argument("config", type=Path, help="the router's TOML configuration")
    keys.set_defaults(run=_keys)
    add_arguments(keys)

    spend = command("spend", _spend, "spend kept in the ledger, grouped by key, caller, model or day")
    spend.add_argument(
        "--by", choices=["key", "caller", "model", "day"], default="caller", help="group by (default caller)"
    )
    spend.add_argument(
        "--since", default="7d", help="from: YYYY-MM-DD, an RFC 3339 time, or a span back like 7d, 12h (default 7d)"
    )
    spend.add_argument("--until", help="to (excluded), in the same forms (default: now)")
    spend.add_argument("--csv", action="store_true", help="CSV instead of a table")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status."""
    args = _parser().parse_args(argv)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        status: int = args.run(args)
    except ConfigError as refusal:
        print(f"asgi-router {args.command}: {args.config}: {refusal}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # piped into `head`: the reader has what it wanted
        sys.stderr.close()
        return 0
    return status
