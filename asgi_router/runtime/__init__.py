"""Work that runs beside requests: the opt-in active health probes (``health.py``)."""
