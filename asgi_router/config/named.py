"""The concrete models a configuration names: the one bounded set of ``provider/model-id`` keys.

Group members (nested groups expanded), alias and rule targets that name a model directly, and
catalog entries. Statistics, the model list, metric labels and the status page all keep to this
set: a client may ask for any model id of a configured provider (a *direct* ref), and a table or
a label set keyed by what clients choose would grow without bound.
"""

from __future__ import annotations

from asgi_router.config.settings import RouterSettings
from asgi_router.core.refs import InvalidRef, RefKind, parse_model_ref

__all__ = ["direct_targets", "named_models"]


def direct_targets(settings: RouterSettings) -> set[str]:
    """The alias and rule targets that name a ``provider/model-id`` (not a group)."""
    found: set[str] = set()
    for target in (*settings.aliases.values(), *(rule.route for rule in settings.rules)):
        ref = parse_model_ref(target)
        if not isinstance(ref, InvalidRef) and ref.kind is RefKind.DIRECT:
            found.add(target)
    return found


def named_models(settings: RouterSettings) -> frozenset[str]:
    """Every ``provider/model-id`` the configuration names (see the module docstring)."""
    found = set(settings.catalog) | direct_targets(settings)
    for name in settings.groups:
        found.update(settings.flat_members(name))
    return frozenset(found)
