"""Routes the router answers besides chat completions, each behind its inbound auth (``router_pages.py``).

``GET /v1/models`` (``models.py``), the Prometheus ``metrics_route`` (``metrics_page.py``) and the
``status_route`` page with its JSON twin (``status.py``, the page itself in ``status.html``), and
the refusal of Anthropic's token counting below each Messages route (``count_tokens.py``), and a
stored Responses API response's own calls below each Responses route, sent to the provider that
produced it (``stored_responses.py``).

The admin surface, only with ``admin_keys``, behind admin keys alone: the admin API on
``admin_route`` (``admin_api.py``: keys issued, changed, revoked and rotated, spend read), who
may open it and the lock against guessing (``admin_door.py``), spend's query and CSV
(``admin_spend.py``), the page (``admin_page.py``, the page itself in ``admin.html``), and all of
it built with the key ring and the keys' caps (``admin_surface.py``).
"""
