"""One request's state, in a layer every phase of the request may import.

``request_state.py`` holds what a request is and what has happened to it so far (its identity,
what planning made of it, every attempt's event, control state, what the answer came to); the
published record is built from it once, when the request ends. ``router_headers.py`` builds the
router's own response headers from it, in one function. ``spend.py`` holds what a served
response used (tokens and cost), the value the answer phase leaves on the request.

It sits below ``inbound`` (the disconnect listener tells it when the client leaves) and above
``observability`` (its record and events are that layer's types): the attempts, the answer and
the middleware all share the one object without a view of it per layer.
"""
