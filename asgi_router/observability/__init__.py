"""What happened to each request, as data and as log lines.

``events.py``: one ``AttemptEvent`` per attempt and one ``RequestRecord`` per request;
``sinks.py``: delivery to event sinks without ever blocking a request; ``redaction.py``: the
last line of defence that scrubs configured keys from the router's log records.
"""
