"""The response cache: a cached group's repeated requests answered from stored answers.

``response_cache.py`` is its two points in a request's phases (the lookup after the plan, the
store once the answer is complete) and the client's controls; ``cache_key.py`` the key (the
canonical request, its protocol, the ref whose plan ran, the caller); ``stored_answer.py`` an
answer kept shape-neutral, read from what the client was sent; ``replay_shapes.py`` an entry written
again as JSON or as an event stream, in either protocol; ``memory_entries.py`` the entries in this
process (least recently used evicted, each with its time to live; a fleet's live in Redis,
``fleet/shared_cache.py``), and ``cache_factory.py`` which of the two a router's settings ask for.
The semantic lookup (``cache.semantic``, the ``semantic`` extra) is ``semantic_lookup.py``: the
index of each group's entries by context and embedding (``semantic_index.py``, numpy) and the
embedding call through the router's own transport (``embedder.py``).

It sits between the answer (``responses``) and the attempts: the middleware asks it after the
plan phase, and it answers a hit itself, without an attempt.
"""
