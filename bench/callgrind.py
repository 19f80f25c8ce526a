"""Callgrind from inside the measured process: its client requests, and its dump files read back.

``bench/phases.py`` marks the regions it counts with these. The client requests are valgrind.h's
amd64 sequence as a few bytes of machine code called through ctypes, so no compiler (and no
valgrind headers) are needed; outside valgrind each answers 0 and does nothing.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct
from pathlib import Path

__all__ = ["Callgrind", "read_dumps"]


class Callgrind:
    """Callgrind's client requests (valgrind.h's amd64 sequence: the four ``rol rdi`` and
    ``xchg rbx, rbx``), one tiny function per request with its argument block built in; each
    answers 0 when not run under valgrind."""

    _PREAMBLE = bytes.fromhex("48c1c70348c1c70d48c1c73d48c1c733")
    _TAIL = bytes.fromhex("4887db4889d0c3")  # xchg rbx,rbx; mov rax,rdx; ret

    def __init__(self) -> None:
        self.name = ctypes.create_string_buffer(128)
        args = ctypes.c_size_t * 6
        codes = (0x1001, 0x43540002, 0x43540003)  # RUNNING_ON_VALGRIND, TOGGLE_COLLECT, DUMP_STATS_AT
        self._blocks = [args(code, ctypes.addressof(self.name) if code == 0x43540003 else 0) for code in codes]
        self._page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        for index, block in enumerate(self._blocks):
            self._page.seek(index * 64)  # movabs rax, block; xor edx, edx; the request
            self._page.write(b"\x48\xb8" + struct.pack("<Q", ctypes.addressof(block)) + b"\x31\xd2")
            self._page.write(self._PREAMBLE + self._TAIL)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self._page))
        running = ctypes.CFUNCTYPE(ctypes.c_size_t)(base)
        self.toggle, self._dump = (ctypes.CFUNCTYPE(None)(base + 64 * i) for i in (1, 2))
        self.running = bool(running())
        self.dumps = 0
        self.out = os.environ.get("BENCH_PHASES_OUT")  # the dump files' prefix

    def dump(self, name: str) -> None:
        """Dump (and reset) what was counted since the last dump, as ``name``; a ``discard``
        dump's file is deleted at once (callgrind numbers its dumps from 1)."""
        self.name.value = name.encode()
        self._dump()
        self.dumps += 1
        if name == "discard" and self.out is not None:
            os.remove(f"{self.out}.{self.dumps}")


_TRIGGER = "desc: Trigger: Client Request: "


def read_dumps(directory: Path) -> dict[str, dict[str, int]]:
    """Per dump name: instructions, and calls into the object allocator, summed over its dumps."""
    found: dict[str, dict[str, int]] = {}
    for path in directory.glob("cg.out*"):
        name, instructions, allocations, target = "", 0, 0, ""
        with path.open() as lines:
            for line in lines:
                if line.startswith("cfn="):
                    target = line[4:].strip()
                elif line.startswith("calls=") and target in ("_PyObject_Malloc", "_PyObject_Calloc"):
                    allocations += int(line[6:].split()[0])
                elif line.startswith(_TRIGGER):
                    name = line[len(_TRIGGER) :].strip()
                elif line.startswith("totals:"):
                    instructions = int(line.split()[1])
        figures = found.setdefault(name, {"instructions": 0, "allocations": 0})
        figures["instructions"] += instructions
        figures["allocations"] += allocations
    return found
