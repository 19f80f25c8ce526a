"""The router's shared vocabulary, at the bottom of the package: every other layer may import it.

Reasons (why an attempt ended) and the one place that classifies what came back into a reason
(``classify.py``: statuses, transport failures, and which reasons fail over by default), the
router's own error (``RouterError``), parsed model references, a candidate, a skip, the header
names that never cross the router, and the deadline helpers every read is bounded with.
Nothing here performs I/O or knows about settings.
"""
