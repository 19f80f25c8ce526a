"""Opening the ledger ``ledger_url`` names: the right driver, connected, its schema up to date."""

from __future__ import annotations

from asgi_router.config.ledger_settings import ledger_target
from asgi_router.core.store_url import mask_store_url
from asgi_router.ledger.database import Database

__all__ = ["open_database"]


async def open_database(url: str) -> Database:
    """The ledger at ``url`` (checked when the settings were built), connected and at the
    router's schema version (its tables created on first start): ``LedgerRefused`` when it
    cannot be, ``LedgerUnavailable`` when its server cannot be reached now."""
    target = ledger_target(url)
    if target.kind == "postgresql":
        from asgi_router.ledger.postgres_database import PostgresDatabase  # the postgres extra

        return await PostgresDatabase.open(target.url, mask_store_url(target.url))
    from asgi_router.ledger.sqlite_database import SqliteDatabase

    shown = "memory://" if target.kind == "memory" else target.url
    return await SqliteDatabase.open(target.path or ":memory:", shown)
