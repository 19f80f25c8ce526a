"""Routes the router answers besides chat completions, each behind its inbound auth (``router_pages.py``).

``GET /v1/models`` (``models.py``), the Prometheus ``metrics_route`` (``metrics_page.py``) and the
``status_route`` page with its JSON twin (``status.py``, the page itself in ``status.html``), and
the refusal of Anthropic's token counting below each Messages route (``count_tokens.py``).
"""
