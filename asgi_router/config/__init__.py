"""Configuration: the pydantic models ``RouterSettings`` is built from, and how it is loaded.

Keyword arguments, a TOML file and ``ASGI_ROUTER_...`` environment variables build the same
object; everything that can be refused without I/O is refused here, when the settings are
built, with a message naming the offending key and where its value came from.

``settings.py`` is ``RouterSettings`` and the checks only the whole can make; the tables it is
made of each have a module: ``provider_settings.py`` (providers, timeouts, the connection pool),
``group_settings.py`` (groups, members, nesting), ``capacity_settings.py`` (a group's ``sticky``
and ``queue``), ``rules_settings.py``, ``catalog_settings.py``,
``degraded_settings.py``, ``resilience_settings.py`` (retries, budgets, breakers, health probes,
events), ``state_settings.py`` (the shared state store), ``responses_settings.py`` (the
Responses API's remembered response ids), ``ledger_settings.py`` (the ledger's URL, admin
keys apart from inbound keys), ``auth_settings.py`` (inbound auth), ``admin_settings.py`` (where the
admin API and page answer) and
``pages_settings.py`` (the router's own ``GET`` routes), ``caller_settings.py`` (caps per caller and per
session), ``cache_settings.py`` (a group's response cache), ``prompt_cache_settings.py`` (a
provider's prompt cache), ``guardrail_settings.py`` (the named guardrails); ``cross_checks.py``
checks that every
name a table uses names something configured; ``named.py`` lists the models a configuration
names (the one bounded set of keys for statistics and labels). ``loading.py`` reads the TOML
file and ``config_error.py`` words a refusal: every problem at once, each with its key, where its
value came from and, for a mistyped word or name, the likely meant one; ``advisories.py`` what
a valid configuration may still get wrong (warnings); ``strict_settings.py`` is the strict base
model. Every field carries its ``description``: the docs' configuration reference is generated
from them. This package imports only ``asgi_router.core``.
"""
