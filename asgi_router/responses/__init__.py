"""Answering the client once the attempts are decided.

``answer.py`` is the answer phase: the winner's response sent or relayed, a refusal passed
through, a canned reply or the router's error, then what the response used counted; ``relay.py``
hands a committed upstream's stream to the client (byte-exact, or cut into whole events by
``whole_events.py``) and ends a stream that breaks with an in-band error whose words are
``relay_failures.py``'s; ``headers.py`` filters what an upstream's headers may say to the client;
``degraded.py`` builds a group's canned reply; ``error_reply.py`` sends the router's own errors.
When a plan has a candidate that can continue a broken stream, ``resume_relay.py`` runs the same
relay on whole events and reports a break to what the attempt loop handed it, appending what the
continuation sends (``resuming.py`` keeps the relay's side: what was said, the splice); the
answer phase runs no attempts. ``client_gone.py`` ends a request whose client left before the
first byte with a 499 the server can drop.
"""
