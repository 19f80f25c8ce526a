"""Guardrails: checks on what goes in (the prompt) and what comes out (the answer).

Named checks (``[guardrails.<name>]``, built in or the operator's own) that block, mask, flag or,
on an answer, fail over to the next candidate. Modules:

- ``guardrail_api.py``: what an operator's own check is given and answers (``GuardrailRequest``,
  ``Allow``, ``Mask``, ``Block``, ``Flag``), exported from ``asgi_router``;
- ``pii.py``: personal data by shape and checksum (Luhn for cards, mod-97 for IBANs);
- ``secret_shapes.py``: credentials by their published shapes;
- ``deny_list.py``: an operator's banned words and patterns;
- ``schema_subset.py``: an answer validated against the JSON schema its request asked for;
- ``text_slots.py``: where a request's or an answer's checked texts are, to put masked ones back;
- ``stream_texts.py``: a held stream's texts, joined per part, and masked ones put back;
- ``builtin_checks.py``: each configured guardrail as a check, and its verdict;
- ``guardrail_run.py``: which checks a request runs, run on its prompt and on each answer.
"""
