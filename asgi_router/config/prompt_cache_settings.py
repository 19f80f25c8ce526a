"""A provider's prompt cache settings: what the router does so that a provider's own prompt cache
stays warm (``prompt_cache``, ``prompt_cache_key``).

Providers cache a prompt's prefix themselves and charge less for the tokens they read from it.
A gateway easily breaks that: it forwards Anthropic's ``cache_control`` marks to an
OpenAI-compatible server that refuses unknown fields, drops them when it translates, or sends
a session to a different cache than the one its sticky routing chose. With ``prompt_cache =
"auto"`` (the default) the router strips the marks for an OpenAI-protocol provider, keeps them
(and adds breakpoints to a long prefix) for an Anthropic one, and, where ``prompt_cache_key``
is on, names the session's cache for OpenAI's routing. What acts on these settings is
``transports/provider.py`` (decided once per provider and route) and ``attempts/steps.py``
(the body each candidate is sent).
"""

from __future__ import annotations

from typing import Final, Literal

import httpx2

__all__ = ["OPENAI_HOST", "PromptCacheMode", "check_prompt_cache", "sends_prompt_cache_key"]

#: ``"auto"``: the router keeps the provider's prompt cache warm; ``"off"``: it sends the request
#: as it would without this feature (marks passed on as the client sent them, nothing added).
PromptCacheMode = Literal["auto", "off"]
#: The one host known to take ``prompt_cache_key``: strict OpenAI-compatible servers refuse
#: fields they do not know, so elsewhere it is sent only when the settings say so.
OPENAI_HOST: Final = "api.openai.com"


def check_prompt_cache(kind: str, mode: PromptCacheMode, cache_key: bool | None) -> None:
    """Refuse a ``prompt_cache_key`` that could never be sent: on an Anthropic provider (the
    Messages API has no such field) or with ``prompt_cache = "off"``."""
    if cache_key:
        if kind == "anthropic":
            raise ValueError('prompt_cache_key applies to kind = "openai" only')
        if mode == "off":
            raise ValueError('prompt_cache_key = true needs prompt_cache = "auto"')


def sends_prompt_cache_key(kind: str, mode: PromptCacheMode, cache_key: bool | None, base_url: str) -> bool:
    """Whether this provider's chat requests carry ``prompt_cache_key`` (the session's digest):
    as set, else only when ``base_url``'s host is OpenAI's own."""
    if kind != "openai" or mode == "off":
        return False
    if cache_key is not None:
        return cache_key
    return httpx2.URL(base_url).host == OPENAI_HOST
