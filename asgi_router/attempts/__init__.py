"""Trying a plan's candidates until one commits: the failover loop, and the plan it walks.

``decisions.py`` is the one decision point of the attempt policy: whether a candidate may be
tried now (and why not), and after each call what next (commit, pass through, retry after a
wait, fail over, stop); its docstring is the whole policy as a table. Its answers about a whole
request (a caller's caps: serve, downgrade or refuse; whether a broken stream is continued) are
made in ``request_answers.py``; each request asks them through its own retry state
(``retry_state.py``: what the request has done so far, kept before and after commit).
``plan_phase.py`` is the pipeline's plan phase (the ``model``
resolved to a plan, a sticky group's member first, a Responses follow-up pinned to the provider
``response_affinity.py`` says produced its previous response), asked again by the wait for capacity.
``loop.py`` drives the plain walk over a plan and ``hedging.py`` races a second candidate
against a slow first one; ``steps.py`` does and records each step of one attempt; ``call.py`` is
the one upstream call (I/O only: it reports what came back); ``context.py`` holds the router's
parts they share; ``outcomes.py`` is what an attempt can end in; ``bookkeeping.py`` and
``usage.py`` keep the numbers strategies read; ``hints.py`` reads how long an upstream asked to
wait; ``wire_body.py`` builds each candidate's request body (``cache_bodies.py`` the one an
OpenAI-protocol provider's prompt cache wants changed); ``continuing.py`` asks candidates
to continue a stream that broke after commit, in the order the decision point gives;
``rate_limits.py`` reads providers' rate-limit headers; ``capacity.py`` (sticky sessions) and
``capacity_queue.py`` (a group's queue) are the groups' capacity-aware routing, and
``capacity_wait.py`` the wait for capacity of a queued request; ``held_stream.py`` holds a
committed stream whole for its group's output guardrails (``output_stream = "buffer"``). What a
status or failure *means* is classified in ``asgi_router.core.classify``.
"""
