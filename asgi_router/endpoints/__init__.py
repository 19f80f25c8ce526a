"""Routes the router answers besides chat completions: ``GET /v1/models`` (``models.py``)."""
