"""From a ``model`` string to a plan: the ordered candidates to try.

``plan.py`` resolves refs (groups, aliases, direct models) into plans; ``strategies.py``
orders a group's members; ``rules.py`` picks a route from the request's ``facts.py``;
``catalog.py`` and ``policy.py`` are what strategies and the attempt loop read per group;
``resumable.py`` says which candidates of a plan may continue a broken stream;
``sticky_keys.py`` is a sticky group's key for a request (a hash, never the text);
``recorded.py`` keeps the facts the rules read as a file does, and reads them back (replay).
Resolution does no I/O and never awaits: plans are built once, from the settings.
"""
