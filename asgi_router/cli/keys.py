"""``asgi-router keys``: virtual keys issued, listed, shown, disabled, revoked and rotated.

The command works on the ledger's database directly (the configuration's ``ledger_url``, or the
default SQLite file when ``admin_keys`` is set), with no server running: the same operations as
the admin API (``keys/key_operations.py``), and the same checks of what is asked. A running
router picks a change up within a second. Each command prints the key as JSON (the admin API's
object); ``create`` and ``rotate`` add its ``secret``, shown this once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

from asgi_router.config.config_error import ConfigError
from asgi_router.config.ledger_settings import effective_ledger_url
from asgi_router.config.settings import RouterSettings
from asgi_router.keys.key_input import InputProblem, KeyChanges, KeyRequest, parse_input
from asgi_router.keys.key_operations import KeyOperations
from asgi_router.keys.key_table import DuplicateName
from asgi_router.keys.stored_keys import StoredKeys
from asgi_router.keys.virtual_key import VirtualKey
from asgi_router.ledger.database import Database, LedgerRefused, LedgerUnavailable
from asgi_router.ledger.opening import open_database

__all__ = ["ACTIONS", "add_arguments", "run_keys"]

#: What ``asgi-router keys`` does, each a sub-command.
ACTIONS = ("create", "list", "show", "disable", "enable", "revoke", "rotate")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``keys`` command's arguments, after ``ACTION CONFIG``."""
    parser.add_argument("id", nargs="?", help="the key's id (show, disable, enable, revoke, rotate)")
    parser.add_argument("--caller", help="create: the caller (team or product) the key belongs to")
    parser.add_argument("--name", help="create: a name, unique within the caller")
    parser.add_argument("--groups", help="create: the refs the key may ask for, comma-separated (default: all)")
    parser.add_argument("--usd-per-day", type=float, help="create: the key's own USD a UTC day")
    parser.add_argument("--tokens-per-day", type=int, help="create: the key's own tokens a UTC day")
    parser.add_argument("--rpm", type=int, help="create: the key's own requests a minute")
    parser.add_argument("--downgrade-to", help="create: the ref served past a cap")
    parser.add_argument("--hard-limit", type=float, help="create: refuse past this multiple of a cap")
    parser.add_argument("--expires-at", help="create: when the key stops opening (RFC 3339)")
    parser.add_argument("--metadata", help="create: a JSON object kept with the key")
    parser.add_argument("--grace", type=float, default=0.0, help="rotate: seconds the old secret still opens")


def _request(args: argparse.Namespace) -> KeyRequest | InputProblem:
    fields: dict[str, Any] = {
        name: value
        for name, value in (
            ("caller", args.caller),
            ("name", args.name),
            ("usd_per_day", args.usd_per_day),
            ("tokens_per_day", args.tokens_per_day),
            ("rpm", args.rpm),
            ("downgrade_to", args.downgrade_to),
            ("hard_limit", args.hard_limit),
            ("expires_at", args.expires_at),
        )
        if value is not None
    }
    if args.groups is not None:
        fields["groups"] = [ref.strip() for ref in args.groups.split(",") if ref.strip()]
    if args.metadata is not None:
        try:
            fields["metadata"] = json.loads(args.metadata)
        except json.JSONDecodeError:
            return InputProblem(422, "metadata", "metadata: not JSON")
    return parse_input(KeyRequest, fields)


async def _act(action: str, args: argparse.Namespace, keys: KeyOperations, out: TextIO) -> int:
    if action == "list":
        for key in await keys.table.every():
            print(json.dumps(key.as_json()), file=out)
        return 0
    if action == "create":
        request = _request(args)
        if isinstance(request, InputProblem):
            raise ConfigError(request.message)
        key, secret = await keys.create(request)
        print(json.dumps({**key.as_json(), "secret": secret}, indent=2), file=out)
        return 0
    if args.id is None:
        raise ConfigError(f"keys {action} needs the key's id")
    found: VirtualKey | None
    if action == "show":
        found = await keys.table.get(args.id)
    elif action in ("disable", "enable"):
        found = await keys.change(args.id, KeyChanges(disabled=action == "disable"))
    elif action == "revoke":
        found = await keys.revoke(args.id)
    else:
        rotated = await keys.rotate(args.id, max(0.0, args.grace))
        if rotated is None:
            raise ConfigError(f"no key has the id {args.id!r}")
        print(json.dumps({**rotated[0].as_json(), "secret": rotated[1]}, indent=2), file=out)
        return 0
    if found is None:
        raise ConfigError(f"no key has the id {args.id!r}")
    print(json.dumps(found.as_json(), indent=2), file=out)
    return 0


def run_keys(
    settings: RouterSettings,
    action: str,
    args: argparse.Namespace,
    out: TextIO = sys.stdout,
    opener: Callable[[str], Awaitable[Database]] = open_database,
) -> int:
    """Run one ``keys`` action on the configuration's ledger; its exit status."""
    url = effective_ledger_url(settings.ledger_url, settings.admin_keys)
    if url is None:
        raise ConfigError("this configuration keeps no virtual keys: set admin_keys (and ledger_url for a fleet)")

    async def run() -> int:
        database = await opener(url)

        async def opened() -> Database:
            return database

        try:
            return await _act(action, args, KeyOperations(StoredKeys(opened)), out)
        finally:
            await database.close()

    try:
        return asyncio.run(run())
    except DuplicateName:
        raise ConfigError("this caller already has a key of this name") from None
    except (LedgerRefused, LedgerUnavailable) as exc:
        raise ConfigError(f"the ledger cannot be used: {exc}") from None
