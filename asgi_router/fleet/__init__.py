"""One router state for a fleet: workers and hosts share breakers, rotation and budgets through Redis.

``shared_state.py`` is :class:`SharedState`, an in-memory state that answers every request from this
process's own view and keeps what is shared fresh in the background, its breakers' changes written
by ``breaker_writes.py`` (coalesced per breaker); ``link.py`` is its one
connection to Redis (per event loop) and the circuit that keeps Redis optional; ``budgets.py``
leases slices of the rpm/tpm budgets and ``caller_budgets.py`` slices of the caller and session
caps; ``scripts.py`` holds the Lua that makes each change atomic; ``shared_affinity.py`` keeps
sticky sessions' members in the store and ``shared_response_ids.py`` the Responses API's response
ids' producers; ``shared_rate_limits.py`` shares providers' stated
limits; ``shared_cache.py`` holds the response cache's entries for the whole fleet;
``state_factory.py`` builds the state the settings ask for.

Nothing here is imported unless ``state_url`` names a Redis store, so the ``redis`` package
stays optional.
"""
