"""Work that runs beside requests: the host app's lifespan with the router's own start-up and
shut-down around it (``lifespan.py``: upstream clients, sink workers, health probes, a metrics
worker's flushes), and the opt-in active health probes (``health.py``)."""
