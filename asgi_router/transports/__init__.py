"""The one place that talks HTTP to upstreams, behind a small seam.

``transport.py`` is the seam (``Transport``, ``UpstreamResponse``); ``aiohttp_transport.py`` (the
default) and ``httpx_transport.py`` implement it, each with one client per running event loop
(``loop_clients.py``), and ``transport_factory.py`` picks the one the settings name;
``provider.py`` holds each provider's per-request constants and ``request_headers.py`` what the
upstream request carries.
"""
