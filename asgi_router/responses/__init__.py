"""Answering the client once the attempts are decided.

``request_context.py`` holds one request's context, the per-request object every phase of the
pipeline shares (what was sent, whether the client is still there, what is in flight, what the
answer came to) and that writes the request's record once it is over; ``answer.py`` is the
answer phase: the winner's response sent or relayed, a refusal passed through, a canned reply or
the router's error, then what the response used counted; ``relay.py`` hands a committed
upstream's stream to the client (byte-exact, or cut into whole events by ``whole_events.py``)
and ends a stream that breaks with an in-band error whose words are ``relay_failures.py``'s;
``headers.py`` filters what an upstream's headers may say to the client; ``degraded.py`` builds
a group's canned reply. When a plan has a candidate that can continue a broken stream,
``resume_relay.py`` relays whole events instead and continues the stream after a break, with
``resuming.py`` asking for and accounting the continuations;
``client_gone.py`` ends a request whose client left before the first byte with a 499 the server
can drop.
"""
