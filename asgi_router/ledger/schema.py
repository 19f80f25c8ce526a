"""The ledger's tables, as plain DDL per schema version, and the check of the version found.

:data:`MIGRATIONS` is the whole history: entry ``n - 1`` holds the statements that take a
database from version ``n - 1`` to version ``n`` (version 0: empty). A new table or column is a
new entry appended at the end, never an edit of a released one, so that every database, however
old, reaches :data:`VERSION` by running the entries it lacks, in order, in one transaction.

The statements are written once for both dialects (SQLite and PostgreSQL): types both accept
(``TEXT``, ``BIGINT``, ``DOUBLE PRECISION``; flags as ``INTEGER`` 0/1) and no dialect's extras.
Times are Unix seconds (``DOUBLE PRECISION``), and each spend row also carries its UTC day
number (``day``), so that "today's tallies" and spend per day are an indexed equality, the same
in both dialects.

``ledger_schema`` holds one row, the version; a database with a version newer than
:data:`VERSION` belongs to a newer router and is refused (:func:`pending`).
"""

from __future__ import annotations

from typing import Final

__all__ = ["MIGRATIONS", "VERSION", "VERSION_TABLE", "SchemaTooNew", "pending"]

#: The table that records which schema version a database is at.
VERSION_TABLE: Final = "ledger_schema"

#: Statements per version, oldest first (see the module docstring).
MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    # Version 1: spend rows and virtual keys.
    (
        # One row per finished request admitted by inbound auth. ``row_id`` is made by the
        # writer, so a batch written twice (its commit's answer lost) is not counted twice.
        """CREATE TABLE spend (
            row_id TEXT PRIMARY KEY,
            request_id TEXT NOT NULL,
            at DOUBLE PRECISION NOT NULL,
            day BIGINT NOT NULL,
            key_id TEXT,
            caller TEXT NOT NULL,
            session TEXT,
            model TEXT NOT NULL,
            served_by TEXT,
            status INTEGER NOT NULL,
            input_tokens BIGINT NOT NULL,
            output_tokens BIGINT NOT NULL,
            measured INTEGER NOT NULL,
            cost_usd DOUBLE PRECISION NOT NULL,
            cached_tokens BIGINT NOT NULL,
            cache_hit INTEGER NOT NULL
        )""",
        "CREATE INDEX spend_by_time ON spend (at)",
        "CREATE INDEX spend_by_day ON spend (day, caller)",
        # Virtual keys (``keys/stored_keys.py``): the secret only as its SHA-256 (hex), and the
        # one a rotation replaced until its grace ends; groups and metadata as JSON text. A name
        # is unique within its caller; ``updated_at`` is what every process polls for changes.
        """CREATE TABLE keys (
            id TEXT PRIMARY KEY,
            caller TEXT NOT NULL,
            name TEXT,
            digest TEXT NOT NULL UNIQUE,
            prefix TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL,
            groups_json TEXT,
            usd_per_day DOUBLE PRECISION,
            tokens_per_day BIGINT,
            rpm BIGINT,
            downgrade_to TEXT,
            hard_limit DOUBLE PRECISION,
            expires_at DOUBLE PRECISION,
            metadata_json TEXT NOT NULL,
            disabled INTEGER NOT NULL,
            revoked INTEGER NOT NULL,
            previous_digest TEXT,
            previous_until DOUBLE PRECISION
        )""",
        "CREATE UNIQUE INDEX keys_by_name ON keys (caller, name)",
        "CREATE INDEX keys_by_update ON keys (updated_at)",
        "CREATE INDEX keys_by_previous ON keys (previous_digest)",
    ),
)

#: The schema version this router writes and reads.
VERSION: Final = len(MIGRATIONS)


class SchemaTooNew(Exception):
    """The database was written by a newer router: this one would misread it."""


def pending(found: int, where: str) -> list[str]:
    """The statements that take a database at version ``found`` (``where``: its masked URL or
    path, for the refusal) to :data:`VERSION`; :class:`SchemaTooNew` naming both versions when it
    is already past it."""
    if found > VERSION:
        raise SchemaTooNew(
            f"the ledger at {where} has schema version {found}, newer than this router's {VERSION}: "
            "upgrade asgi-router (or point ledger_url at another database)"
        )
    return [statement for version in MIGRATIONS[found:] for statement in version]
