"""The two protocols the router speaks, and translation between them.

Clients speak OpenAI's chat completions or Anthropic's Messages API (``routes.py`` says which a
route is, from its path); providers are ``kind = "openai"`` or ``kind = "anthropic"``. When both
sides speak the same protocol the router relays bytes untouched; a chat-completion request routed
to an Anthropic provider is translated on the way out (``to_anthropic.py``) and its answer on the
way back, a whole body or a stream re-encoded event by event as it arrives (``from_anthropic.py``,
over the SSE framing of ``sse.py``); ``cache_marks.py`` finds Anthropic's prompt cache marks in a
chat request, strips them for an OpenAI-protocol provider and marks a long prefix for Anthropic.
``anthropic_errors.py`` shapes the router's own errors for Anthropic clients and reads
Anthropic's. ``continuation.py`` reads what a broken stream said, builds the request that
continues it, and splices the continuation onto it (``continuation_messages.py`` the same for
the Messages API); ``first_event.py`` says whether a stream's event is one a client shows,
``stream_end.py`` whether a chunk ends the stream; ``openai_responses_events.py`` is the same for
OpenAI's Responses API (its commit point, its failures, its last event, its in-band error). A
Responses request served by a member without that API is translated to chat completions
(``responses_to_chat.py``; for Anthropic, then on through ``to_anthropic.py``) and its answer back
to a Responses object or event stream (``chat_to_responses.py``). Pure functions and small
per-response objects: nothing here performs I/O.
"""
