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
    """Complete SSE events' data from chunks fed in order, each event at most ``limit`` bytes.

    Linear in the bytes fed: a chunk without an event boundary is only kept (the unfinished
    event's pieces are joined once, when its boundary comes), so an event that arrives in many
    small pieces costs its size, not its size times its pieces. An event (or the unfinished
    one) over ``limit`` bytes sets :attr:`too_large` and nothing more is split: the caller ends
    the stream, since no client needs an event that size and holding it is what a hostile
    upstream would want.
    """

    __slots__ = ("_pieces", "_size", "_skip_lf", "limit", "too_large")

    def __init__(self, limit: int | None = None) -> None:
        #: The unfinished event's bytes, line ends already normalised to ``\n``.
        self._pieces: list[bytes] = []
        self._size = 0
        #: The last chunk ended in ``\r``: a ``\n`` starting the next one is the same line end.
        self._skip_lf = False
        self.limit = limit
        #: An event was larger than ``limit``: nothing more is split.
        self.too_large = False

    def feed(self, chunk: bytes) -> list[bytes]:
        """The data of every event that ``chunk`` completes, in order (events without data are
        left out)."""
        if self.too_large:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk.startswith(b"\n"):
                chunk = chunk[1:]
        # ``find``, not ``in``: on bytes, ``in`` first tries its operand as an integer, an
        # exception raised and cleared (docs/performance.md).
        if chunk.find(b"\r") >= 0:
            self._skip_lf = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        joins = bool(self._pieces) and self._pieces[-1].endswith(b"\n") and chunk.startswith(b"\n")
        if not joins and chunk.find(b"\n\n") < 0:  # no boundary: keep the piece, split nothing
            if chunk:
                self._pieces.append(chunk)
                self._size += len(chunk)
                self._check(self._size)
            return []
        data = b"".join(self._pieces) + chunk if self._pieces else chunk
        blocks = data.split(b"\n\n")
        rest = blocks.pop()
        self._pieces, self._size = ([rest], len(rest)) if rest else ([], 0)
        found: list[bytes] = []
        for block in blocks:
            if self._check(len(block)):
                return found
            at = block.find(b"data:")
            if at >= 0 and (at == 0 or block[at - 1] == 10) and block.find(b"\n", at) < 0:
                # The usual event: its one ``data:`` line is its last (10 is ``\n``).
                value = block[at + 5 :]
                found.append(value[1:] if value.startswith(b" ") else value)
            else:
                data_of = _data_of(block)
                if data_of is not None:
                    found.append(data_of)
        self._check(self._size)
        return found

    def _check(self, size: int) -> bool:
        """Whether ``size`` bytes of one event are over the limit (then nothing more is split)."""
        if self.limit is not None and size > self.limit:
            self.too_large = True
            self._pieces, self._size = [], 0
        return self.too_large

    @property
    def pending(self) -> bool:
        """Whether bytes of an unfinished event are held (the stream stopped mid-event)."""
        return any(piece.strip() for piece in self._pieces)


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
