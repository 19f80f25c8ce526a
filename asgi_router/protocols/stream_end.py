"""Whether a chunk a client was sent ends its stream: then the client has the whole answer.

Both protocols end a stream with a last event of their own (OpenAI's ``data: [DONE]``,
Anthropic's ``message_stop``): once one went out, a client that closes before the response's
last (empty) message still got everything, so the request is ``served``, not aborted. The relay
asks it of the chunk it just sent; the request asks it of its last chunk when its client leaves.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ENDINGS", "MAY_END", "ends_stream"]

#: How a chunk that ends a stream ends (OpenAI's ``[DONE]``, Anthropic's ``message_stop``).
ENDINGS: Final = (b"data: [DONE]\n\n", b"data: [DONE]\r\n\r\n", b'"message_stop"}\n\n', b'"message_stop"}\r\n\r\n')
#: Above the fourth byte from the end of every one of :data:`ENDINGS` (``E`` of ``[DONE]``, the
#: quote of ``"message_stop"``, ``\r`` of a CRLF ending). A chunk whose fourth byte from the end
#: is not below it cannot end the stream (a chat chunk's is the ``]`` of ``}]}``), so the exact
#: test runs only on the few chunks that may end it (docs/performance.md).
MAY_END: Final = b"F"


def ends_stream(chunk: bytes) -> bool:
    """Whether ``chunk``, the last one sent, ends with the stream's last event: the client has
    the whole answer."""
    return chunk[-4:-3] < MAY_END and chunk.endswith(ENDINGS)
