"""The ledger: keys and spend that outlast the process, in SQLite (one host) or PostgreSQL (a fleet).

``ledger_url`` names the database (``config/ledger_settings.py``). Nothing here sits on a
request's path: spend rows are written in background batches, and what the router reads from
the ledger it reads at start or in the background.

Modules:

* ``database``: the one async interface over both drivers, their errors translated into the
  router's own (refused at start, unavailable now, a conflict);
* ``opening``: ``open_database``, the driver ``ledger_url`` names, connected, its schema up to date;
* ``sqlite_database``: the stdlib's ``sqlite3`` on a thread of its own (WAL, ``busy_timeout``);
* ``postgres_database``: ``asyncpg`` with a small pool (the ``postgres`` extra);
* ``schema``: the tables as plain DDL per schema version, and the refusal of a newer schema;
* ``spend_rows``: the spend row a finished request's record becomes (``spend_row_from_record``);
* ``spend_writer``: the bounded buffer of rows and their background batch writes, pruning;
* ``start_tallies``: what the caps had counted, read back from the rows at start;
* ``spend_report``: spend added up by key, caller, model or day (the CLI and the admin API);
* ``service``: ``Ledger``, the ledger as the router runs it (opened at start, closed at shutdown).
"""
