"""Keeping a failing upstream from taking requests down with it.

Circuit breakers with their stepwise recovery (``breaker.py``), slowness judged against latency
targets (``slowness.py``), admission to a candidate (``gate.py``: breakers, ramps, slow marks
and concurrency caps), retry backoff and budgets (``retry.py``), and all mutable routing state
behind one interface (``router_state.py``, ``stats.py``); a read-only view of that state for the status
page and the metrics' gauges (``overview.py``); sticky sessions' memory of which member served a
key (``affinity.py``). Caps per caller and per session: what each caller and session used
(``caller_tally.py``) and the answer per request, serve, downgrade or refuse (``caller_limits.py``); a virtual
key's own caps, beside its caller's (``key_caps.py``).
"""
