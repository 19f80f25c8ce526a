"""A last line of defence: the ``asgi_router`` logger scrubs configured keys from what it emits.

The router never formats a key into a log line on purpose (events hold candidates, reasons and
timings; error messages are built from those too). But it does log tracebacks of failures it
does not recognise, and a traceback carries the exception's message, which a transport or a
host's ``authorize`` callable may have built from the request's headers. So every router puts a
filter of its own on the ``asgi_router`` logger (:func:`scrub_while_alive`) that replaces any
occurrence of its secrets (provider keys, inbound ``api_keys``) with ``[redacted]`` before a
handler sees the record, and that leaves the logger with the router. Only whole keys are
matched: the router never prints part of a key either (no "sk-...abcd" masking), so there is no
partial form to look for.

The check costs one substring search per secret per emitted record; records that are never
emitted (the logger disabled for their level) cost nothing.
"""

from __future__ import annotations

import logging
import re
import traceback
import weakref
from collections.abc import Iterable
from typing import Final

from asgi_router.config.settings import RouterSettings
from asgi_router.core.store_url import store_url_secrets
from asgi_router.observability.events import logger

__all__ = ["REDACTED", "SecretFilter", "scrub_while_alive", "secrets_of"]

REDACTED: Final = "[redacted]"

# Anything shorter is refused by config validation; guard anyway so that a stray short
# string cannot turn every log line into confetti.
_MIN_SECRET: Final = 8


class SecretFilter(logging.Filter):
    """Replaces every occurrence of its secrets in a record's message and traceback."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = frozenset(secret for secret in secrets if len(secret) >= _MIN_SECRET)

    def _scrub(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        return text

    def _contains(self, text: str) -> bool:
        return any(secret in text for secret in self.secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        message = record.getMessage()
        if self._contains(message):
            record.msg, record.args = self._scrub(message), None
        if record.exc_info is not None:
            text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
            if self._contains(text):
                # Handlers format exc_text when set; the exception object itself is dropped so
                # no handler can format it again from the original.
                record.exc_info, record.exc_text = None, self._scrub(text)
        elif record.exc_text and self._contains(record.exc_text):
            record.exc_text = self._scrub(record.exc_text)
        return True


def scrub_while_alive(owner: object, secrets: Iterable[str]) -> SecretFilter:
    """Scrub ``secrets`` from the ``asgi_router`` logger's records for as long as ``owner`` (a
    router) lives: the filter is taken off the logger when ``owner`` is collected, so no secret
    list outlives the router that configured it, and two routers each scrub their own keys."""
    scrubber = SecretFilter(secrets)
    logger.addFilter(scrubber)
    weakref.finalize(owner, logger.removeFilter, scrubber)
    return scrubber


_CREDENTIAL_HEADER: Final = re.compile(r"key|token|secret|auth|password|credential|signature", re.IGNORECASE)


def secrets_of(settings: RouterSettings) -> list[str]:
    """Every key ``settings`` configures: the providers' (resolved from the environment too),
    the inbound ``api_keys`` and ``admin_keys``, the shared state's Redis password and the
    ledger's database password."""
    found = [key.get_secret_value() for provider in settings.providers.values() if (key := provider.key())]
    # Static provider headers that carry credentials (Azure's ``api-key``, a gateway token, ...).
    found += [
        value
        for provider in settings.providers.values()
        for name, value in provider.headers.items()
        if _CREDENTIAL_HEADER.search(name) and len(value) > 4
    ]
    inbound = settings.api_keys
    if inbound is not None:
        found += [key.get_secret_value() for key in (inbound.values() if isinstance(inbound, dict) else inbound)]
    # The shared state's Redis password, in every form the URL can carry it (the router logs the
    # URL masked; this catches any other path).
    if settings.state_url is not None:
        found += [text for text in store_url_secrets(settings.state_url.get_secret_value()) if len(text) > 4]
    if settings.ledger_url is not None:
        found += [text for text in store_url_secrets(settings.ledger_url.get_secret_value()) if len(text) > 4]
    if settings.admin_keys is not None:
        found += [key.get_secret_value() for key in settings.admin_keys]
    return found
