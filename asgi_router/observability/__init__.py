"""What happened to each request, as data and as log lines.

``events.py``: one ``AttemptEvent`` per attempt and one ``RequestRecord`` per request;
``sinks.py``: delivery to event sinks without ever blocking a request; ``jsonl.py``: the sink
that records requests for ``asgi-router replay``; ``redaction.py``: the last line of defence that
scrubs configured keys from the router's log records. ``metrics.py`` (Prometheus) and
``tracing.py`` (OpenTelemetry) need the optional extras and are imported through ``optional.py``
only by a router that uses them; ``metrics_tally.py`` is what finished requests add up to
between scrapes, and ``caller_metrics.py`` the per-caller families ``metrics.py`` adds when
callers are capped, ``cache_metrics.py`` the response cache's families, when a group caches.
"""
