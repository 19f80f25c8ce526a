"""Trying a plan's candidates until one commits: the failover loop.

``loop.py`` decides the order and the retries in place; ``steps.py`` does and records each
step of one attempt; ``hedging.py`` races a second candidate against a slow first one;
``outcomes.py`` is what an attempt can end in; ``bookkeeping.py`` and ``usage.py`` keep the
numbers strategies read; ``hints.py`` reads how long an upstream asked to wait; ``wire.py``
builds each candidate's request body. What a status or failure *means* is decided in
``asgi_router.core.classify``.
"""
