"""Configuration: the pydantic models ``RouterSettings`` is built from, and how it is loaded.

Keyword arguments, a TOML file and ``ASGI_ROUTER_...`` environment variables build the same
object; everything that can be refused without I/O is refused here, when the settings are
built, with a message naming the offending key and where its value came from.
"""
