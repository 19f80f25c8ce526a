"""The benchmark harness: ``python -m bench`` measures the router beside the floor of one hop.

Every server runs as its own process on 127.0.0.1 under uvicorn (uvloop + httptools, one
worker), as it would in production; load comes from ``wrk``, an external C load generator, so
the Python under test does not share a process with the Python that measures it. See
``docs/performance.md`` for what is measured, why, and how to read ``bench/results.md``.

Modules, in the order a run uses them: :mod:`bench.upstream` (the fast mock upstream),
:mod:`bench.floor` (a raw aiohttp passthrough proxy: the floor), :mod:`bench.host` (a host
app with ``ModelRouter`` mounted), :mod:`bench.procs` (starting and sampling the processes),
:mod:`bench.wrk` (driving them), :mod:`bench.streams` (1,000 open streams),
:mod:`bench.micro` (in-process micro-benchmarks), :mod:`bench.scenarios` and
:mod:`bench.report`; :mod:`bench.phases` (``python -m bench phases``) counts where one
request's instructions and allocations go, phase by phase, under callgrind (its client requests
and dumps: :mod:`bench.callgrind`).
"""
