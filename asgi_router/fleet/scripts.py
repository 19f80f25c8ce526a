"""The Lua scripts the shared state runs in Redis: each one atomic, one round trip.

Redis runs a script to completion before any other command, so a breaker's count, its phase and
its probe slots change together, and a budget's slice is granted against a window no other
process can change meanwhile. Time is the store's own (``TIME``): processes on several hosts
share one clock for what they share, and each converts an age back to its own monotonic clock.

**Breaker** (``KEYS``: the breaker's hash, the index of breakers; ``ARGV``: the operation, the
policy, the key's time to live, the most breakers kept, the channel, the breaker's name, whether
this process opened it by its own failure-rate rule, the hash keys' prefix, how many times the
operation happened: a process coalesces a burst of one breaker's failures into one write; then
the ramp's number of steps and ``ramp_step``, the open cause and p90 of a ``trip``, the step an
``advance`` starts from, the seconds a ``slow`` mark holds). The policy's third value is
``probe_interval``: what a failed probe waits (``breaker.py`` has the state machine this mirrors).
Operations: ``fail`` (failures while closed; opens at the policy's count, or at once while the
breaker ramps), ``ok`` (a success resets the count), ``probe_ok`` / ``probe_fail`` (a half-open
probe's result; closing starts the ramp), ``trip`` / ``recover`` (health probes, and the slowness
rule's opening with cause ``slow``), ``claim`` (ask for one of the half-open probe slots, moving
an open breaker whose time is up to half-open), ``advance`` (a process counted ``ramp_successes``
in a row: the next ramp step, unless the fleet is past that step already), ``slow`` (mark the
candidate slow for that long, or lift the mark). Every write bumps a version (the store's clock in
microseconds, never lower than the key's last); a change of phase, of the count between zero and
not, of the ramp step or of the slow mark is published, so that every process knows whether its
next success must reset the count, which share to admit and what to demote. It answers ``[phase,
seconds since it opened, open_for, consecutive failures, version, granted, cause, p90, ramp step
(-1: none), seconds since the step began, seconds the slow mark still holds]``; messages carry the
same after the breaker's name. The
index (a sorted set by last write) bounds how many breakers the store keeps: past the bound, the
least recently written is forgotten, as the in-memory table forgets, at most ``TRIM_BATCH``
per write: an index that something else filled far past the bound is trimmed a little on every
write instead of in one long script that would hold Redis up for everyone.

**Resync** (``KEYS``: the index of breakers; ``ARGV``: the hash keys' prefix, the first and last
rank to read, most recently written first). Reads one batch of the index and the state of each
breaker in it that still exists, in one round trip (a pipeline of one read per breaker costs
the client far more than Redis), and answers ``[seconds, microseconds, how many names the batch
held, [[name, phase, opened_at, open_for, consecutive, version, cause, p90, step, step_at,
slow_until], ...]]`` (times on the store's clock). A batch is small: the
script never holds Redis up for long, however large the index.

**Lease** (``KEYS``: the requests and tokens windows, hashes of second → count; ``ARGV``: the
rpm and tpm caps, ``-1`` for none, the slice wanted of each, what this process used beyond its
slices, the window's length). Sums the rolling window, counts the debt, grants what is left up to
the slice wanted, counts the grant as used, and answers ``[requests granted, tokens granted,
requests used, tokens used, seconds until the oldest use leaves the window]``.
"""

from __future__ import annotations

from typing import Final

__all__ = ["BREAKER", "LEASE", "RESYNC", "TRIM_BATCH"]

#: The most index entries one breaker write forgets (each write adds at most one).
TRIM_BATCH: Final = 16

BREAKER: Final = """
local TRIM_BATCH = @TRIM_BATCH@
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local op = ARGV[1]
local threshold = tonumber(ARGV[2])
local base_open = tonumber(ARGV[3])
local reopen = tonumber(ARGV[4])
local probes_max = tonumber(ARGV[5])
local probe_timeout = tonumber(ARGV[6])
local ttl = tonumber(ARGV[7])
local max_keys = tonumber(ARGV[8])
local count = tonumber(ARGV[13]) or 1
local ramp_len = tonumber(ARGV[14]) or 0
local ramp_step = tonumber(ARGV[15]) or 10
local h = KEYS[1]
local st = redis.call('HMGET', h, 'phase', 'opened_at', 'open_for', 'consec', 'v', 'probes', 'ok',
  'cause', 'p90', 'step', 'step_at', 'slow')
local phase = st[1] or 'closed'
local opened_at = tonumber(st[2]) or 0
local open_for = tonumber(st[3]) or base_open
local consec = tonumber(st[4]) or 0
local v = tonumber(st[5]) or 0
local probes = {}
if st[6] then probes = cjson.decode(st[6]) end
local ok = tonumber(st[7]) or 0
local cause = st[8] or 'failures'
local p90 = st[9] or ''
local step = tonumber(st[10]) or -1
local step_at = tonumber(st[11]) or 0
local slow = tonumber(st[12]) or 0
-- A ramp moves on with time by itself (every process computes the same): catch up first.
if step >= 0 then
  local passed = math.floor((now - step_at) / ramp_step)
  if passed > 0 then
    step = step + passed; step_at = step_at + passed * ramp_step
    if step >= ramp_len then step = -1; step_at = 0 end
  end
end
local before = phase
local counted_before = consec > 0
local step_before = step
local slow_before = slow > now
local granted = 0

local function open(duration, why)
  phase = 'open'; opened_at = now; open_for = duration; probes = {}; ok = 0; cause = why
  step = -1; step_at = 0
end
local function close()
  phase = 'closed'; opened_at = 0; open_for = base_open; consec = 0; probes = {}; ok = 0
  cause = 'failures'; p90 = ''
  if ramp_len > 0 then step = 0; step_at = now else step = -1; step_at = 0 end
end

if op == 'fail' then
  for _ = 1, count do
    if phase ~= 'closed' then break end
    consec = consec + 1
    if step >= 0 then open(reopen, 'failures')
    elseif consec >= threshold or ARGV[11] == '1' then open(base_open, 'failures') end
  end
elseif op == 'ok' then
  if phase == 'closed' then consec = 0 end
elseif op == 'probe_ok' then
  for _ = 1, count do
    if phase ~= 'half_open' then break end
    table.remove(probes, 1)
    ok = ok + 1
    if ok >= probes_max then close() end
  end
elseif op == 'probe_fail' then
  if phase == 'half_open' then open(reopen, cause) end
elseif op == 'trip' then
  if phase == 'closed' then
    if step >= 0 then open(reopen, ARGV[16]) else open(base_open, ARGV[16]) end
    p90 = ARGV[17]
  elseif phase == 'half_open' or now >= opened_at + open_for then open(reopen, cause) end
elseif op == 'recover' then
  if phase == 'half_open' or (phase == 'open' and now >= opened_at + open_for) then close() end
elseif op == 'claim' then
  if phase == 'open' and now >= opened_at + open_for then
    phase = 'half_open'; probes = {}; ok = 0
  end
  if phase == 'half_open' then
    local kept = {}
    for _, started in ipairs(probes) do
      if started > now - probe_timeout then table.insert(kept, started) end
    end
    probes = kept
    if #probes < probes_max then
      table.insert(probes, now)
      granted = 1
    end
  end
elseif op == 'advance' then
  if phase == 'closed' and step >= 0 and step == tonumber(ARGV[18]) then
    step = step + 1; step_at = now
    if step >= ramp_len then step = -1; step_at = 0 end
  end
elseif op == 'slow' then
  local left = tonumber(ARGV[19]) or 0
  if left > 0 then slow = now + left else slow = 0 end
end

v = math.max(v + 1, math.floor(now * 1000000))
local version = string.format('%.0f', v)
local encoded = '[]'
if #probes > 0 then encoded = cjson.encode(probes) end
redis.call('HSET', h, 'phase', phase, 'opened_at', string.format('%.6f', opened_at),
  'open_for', string.format('%.6f', open_for), 'consec', consec, 'v', version, 'probes', encoded, 'ok', ok,
  'cause', cause, 'p90', p90, 'step', step, 'step_at', string.format('%.6f', step_at),
  'slow', string.format('%.6f', slow))
redis.call('EXPIRE', h, ttl)
if redis.call('ZADD', KEYS[2], now, ARGV[10]) == 1 then
  local extra = math.min(redis.call('ZCARD', KEYS[2]) - max_keys, TRIM_BATCH)
  if extra > 0 then
    local evicted = redis.call('ZPOPMIN', KEYS[2], extra)
    for i = 1, #evicted, 2 do redis.call('DEL', ARGV[12] .. evicted[i]) end
  end
end
redis.call('EXPIRE', KEYS[2], ttl)
local age = 0
if phase ~= 'closed' then age = now - opened_at end
local step_age = 0
if step >= 0 then step_age = now - step_at end
local slow_left = 0
if slow > now then slow_left = slow - now end
local state = {phase, string.format('%.6f', age), string.format('%.6f', open_for), consec, version, granted,
  cause, p90, step, string.format('%.6f', step_age), string.format('%.6f', slow_left)}
if phase ~= before or counted_before ~= (consec > 0) or step ~= step_before or (slow > now) ~= slow_before
    or op == 'slow' then
  redis.call('PUBLISH', ARGV[9], cjson.encode({ARGV[10], phase, age, open_for, consec, version,
    cause, p90, step, step_age, slow_left}))
end
return state
""".replace("@TRIM_BATCH@", str(TRIM_BATCH))

RESYNC: Final = """
local t = redis.call('TIME')
local names = redis.call('ZREVRANGE', KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]))
local found = {}
for _, name in ipairs(names) do
  local st = redis.call('HMGET', ARGV[1] .. name, 'phase', 'opened_at', 'open_for', 'consec', 'v',
    'cause', 'p90', 'step', 'step_at', 'slow')
  if st[1] and st[5] then
    table.insert(found, {name, st[1], st[2] or '0', st[3] or '0', st[4] or '0', st[5],
      st[6] or 'failures', st[7] or '', st[8] or '-1', st[9] or '0', st[10] or '0'})
  end
end
return {t[1], t[2], #names, found}
"""

LEASE: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1])
local cap_r = tonumber(ARGV[1])
local cap_t = tonumber(ARGV[2])
local want_r = tonumber(ARGV[3])
local want_t = tonumber(ARGV[4])
local debt_r = tonumber(ARGV[5])
local debt_t = tonumber(ARGV[6])
local window = tonumber(ARGV[7])
local oldest = now

local function total(key)
  local sum = 0
  local flat = redis.call('HGETALL', key)
  for i = 1, #flat, 2 do
    local second = tonumber(flat[i])
    if second == nil or second <= now - window then
      redis.call('HDEL', key, flat[i])
    else
      local n = tonumber(flat[i + 1]) or 0
      sum = sum + n
      if n > 0 and second < oldest then oldest = second end
    end
  end
  return sum
end

local used_r = total(KEYS[1])
local used_t = total(KEYS[2])
local grant_r = 0
local grant_t = 0
if cap_r >= 0 then grant_r = math.max(0, math.min(want_r, cap_r - used_r - debt_r)) end
if cap_t >= 0 then grant_t = math.max(0, math.min(want_t, cap_t - used_t - debt_t)) end
local add_r = debt_r + grant_r
local add_t = debt_t + grant_t
if add_r ~= 0 then redis.call('HINCRBY', KEYS[1], now, add_r) end
if add_t ~= 0 then redis.call('HINCRBY', KEYS[2], now, add_t) end
redis.call('EXPIRE', KEYS[1], window + 5)
redis.call('EXPIRE', KEYS[2], window + 5)
return {grant_r, grant_t, used_r + add_r, used_t + add_t, oldest + window - now}
"""
