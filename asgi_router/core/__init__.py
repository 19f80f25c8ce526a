"""The router's shared vocabulary, at the bottom of the package: every other layer may import it.

Reasons (``reasons.py``: why an attempt ended) and the one place that classifies what came back
into a reason (``classify.py``: statuses, transport failures, and which reasons fail over by
default), the router's own error and its OpenAI shape (``router_errors.py``), the errors
transports raise (``upstream_errors.py``), parsed model references (``refs.py``), the protocol
a route's path speaks (``route_paths.py``), a candidate (``candidate.py``), a skip
(``skip.py``), the header names that never cross the router (``header_names.py``), and the
deadline every read is bounded with (``deadlines.py``).
``store_url.py`` masks the shared store's URL wherever it is shown; ``usage_bounds.py`` decides
which token counts an upstream's ``usage`` may state.
Nothing here performs I/O or knows about settings.
"""
