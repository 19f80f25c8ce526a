"""Answering the client once the attempts are decided.

``relay.py`` hands a committed upstream's bytes to the client unchanged (and ends a stream that
breaks with an in-band error); ``headers.py`` filters what an upstream's headers may say to the
client; ``degraded.py`` builds a group's canned reply.
"""
