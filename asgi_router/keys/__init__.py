"""Virtual keys: inbound keys issued while the gateway runs, each with its caller, groups and caps.

``virtual_key.py`` is the key itself (what the admin API shows, and the request checks it needs:
usable now, allowed this model); ``key_secrets.py`` makes a key's secret and the only form it is
kept in (its SHA-256); ``key_input.py`` checks what an operator asks for (the admin API and the
command line share it); ``key_table.py`` is where keys are kept (the seam a database fills, and
the in-memory table); ``key_ring.py`` is this process's copy that requests read: no database
round trip for a known key, changes picked up in the background within a second;
``key_operations.py`` is what an operator does to keys (create, change, revoke, rotate), for the
admin API and the command line alike; ``stored_keys.py`` is the ``keys`` table in the ledger's
database (the ledger's, opened at start).
"""
