"""Configuration: the pydantic models ``RouterSettings`` is built from, and how it is loaded.

Keyword arguments, a TOML file and ``ASGI_ROUTER_...`` environment variables build the same
object; everything that can be refused without I/O is refused here, when the settings are
built, with a message naming the offending key and where its value came from.

``settings.py`` is ``RouterSettings`` and the checks only the whole can make; the tables it is
made of each have a module, named ``*_settings`` so that none shares its name with the module
that acts on it: ``provider_settings.py`` (providers, timeouts, the connection pool),
``group_settings.py`` (groups, members, nesting), ``rules_settings.py``, ``catalog_settings.py``,
``degraded_settings.py``, ``resilience_settings.py`` (retries, budgets, breakers, health probes,
events), ``auth_settings.py`` (inbound auth), ``pages_settings.py`` (the router's own ``GET``
routes) and ``state_settings.py`` (``state_url``: in memory or shared through Redis);
``named.py`` lists the models a configuration names (the one bounded set of keys for statistics
and labels). ``loading.py`` reads the TOML file and ``config_error.py`` words a refusal;
``strict_settings.py`` is the strict base model. Only settings and their checks live here: what
acts on them lives with its concern (``inbound/auth.py``, ``routing/rules.py``,
``responses/degraded.py``, ``endpoints/router_pages.py``). Every field carries its
``description``: the docs' configuration reference is generated from them. This package imports
only ``asgi_router.core``.
"""
