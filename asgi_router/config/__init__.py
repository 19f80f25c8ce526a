"""Configuration: the pydantic models ``RouterSettings`` is built from, and how it is loaded.

Keyword arguments, a TOML file and ``ASGI_ROUTER_...`` environment variables build the same
object; everything that can be refused without I/O is refused here, when the settings are
built, with a message naming the offending key and where its value came from.

``settings.py`` is ``RouterSettings`` and the checks only the whole can make; the tables it is
made of each have a module: ``providers.py`` (providers, timeouts, the connection pool),
``groups.py`` (groups, members, nesting), ``rules.py``, ``catalog.py``, ``degraded.py``,
``resilience.py`` (retries, budgets, breakers, health probes, events), ``inbound_auth.py`` and
``pages.py`` (the router's own ``GET`` routes); ``named.py`` lists the models a configuration
names (the one bounded set of keys for statistics and labels).
``loading.py`` reads the TOML file and ``errors.py`` words a refusal; ``base.py`` is the strict
base model. Every field carries its ``description``: the docs' configuration reference is
generated from them. This package imports only ``asgi_router.core``.
"""
