"""Server-sent events cut out of a byte stream that arrives in arbitrary pieces.

An upstream's chunks follow TCP, not events: one chunk may hold three events, or half a line,
or half of a UTF-8 character. :class:`EventSplitter` keeps the unfinished tail and hands out the
``data`` of each complete event (its ``data:`` lines joined with ``\\n``, as the SSE
specification says), never decoding a byte before its event is whole. Lines may end in ``\\n``,
``\\r\\n`` or ``\\r``; a ``\\r`` that ends a chunk is held back until the next byte says whether
a ``\\n`` belongs to it. Event names are not kept: every Messages API event names its own
``type`` in its data. Comments (``:``) and fields other than ``data`` are skipped.
"""

from __future__ import annotations

__all__ = ["EventSplitter"]


class EventSplitter:
    """Complete SSE events' data from chunks fed in order."""

    __slots__ = ("_rest", "_skip_lf")

    def __init__(self) -> None:
        self._rest = b""
        #: The last chunk ended in ``\r``: a ``\n`` starting the next one is the same line end.
        self._skip_lf = False

    def feed(self, chunk: bytes) -> list[bytes]:
        """The data of every event that ``chunk`` completes, in order (events without data are
        left out)."""
        if self._skip_lf:
            self._skip_lf = False
            if chunk.startswith(b"\n"):
                chunk = chunk[1:]
        data = self._rest + chunk if self._rest else chunk
        if b"\r" in data:
            self._skip_lf = data.endswith(b"\r")
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        blocks = data.split(b"\n\n")
        self._rest = blocks.pop()
        found: list[bytes] = []
        for block in blocks:
            at = block.find(b"data:")
            if at >= 0 and (at == 0 or block[at - 1] == 10) and block.find(b"\n", at) < 0:
                # The usual event: its one ``data:`` line is its last (10 is ``\n``).
                value = block[at + 5 :]
                found.append(value[1:] if value.startswith(b" ") else value)
            else:
                data_of = _data_of(block)
                if data_of is not None:
                    found.append(data_of)
        return found

    @property
    def pending(self) -> bool:
        """Whether bytes of an unfinished event are held (the stream stopped mid-event)."""
        return bool(self._rest.strip())


def _data_of(block: bytes) -> bytes | None:
    """An event's ``data:`` lines joined with ``\n`` (``None``: it has none)."""
    data: bytes | None = None
    for line in block.split(b"\n"):
        if line.startswith(b"data:"):
            value = line[5:]
            if value.startswith(b" "):
                value = value[1:]
            data = value if data is None else data + b"\n" + value
    return data
