-- Take a token lock (exclusively), or queue for it and report how long its holder's lease
-- has left.
-- include: waiters
-- KEYS[1] lock key (a plain string holding the owner's token, as redis-py's Lock uses; or
--         SHARED while readers hold it); KEYS[2] waiter queue of this lock (same hash slot);
-- KEYS[3] its readers (same hash slot); KEYS[4] (fencing only) fence counter
-- ARGV[1] token; ARGV[2] lease ttl in ms
-- ARGV[3] mode: 0 try once (never queues); 1 queue if busy; 2 again: this waiter queued
--         before, so it may have been handed the lock, and it keeps its place in the queue
-- ARGV[4] queue window in ms; ARGV[5] the ttl of a queue entry without terms, in ms;
-- ARGV[6] '1' if PUBLISH counts prove a waiter gone, '0' on a cluster; ARGV[7] limit (1 for a
--         lock: part of the queue entry)
-- ARGV[8] (fencing only) how long to keep the fence counter, in ms
-- returns {1, ttl ms[, fencing token]} acquired
--       | {0, ms until the holder's lease ends (the longest reader's), or -1 if it never ends}
local mode = ARGV[3]
local mine = false
local holder = nil
local queued = entry(ARGV[1], ARGV[2], ARGV[7])
if mode ~= '2' then
  -- One command takes the lock or reads its holder where the server allows NX with GET
  -- (Redis >= 7, whose scripts see REDIS_VERSION_NUM; 6.2 refuses the pair): a contended
  -- attempt runs one command less. A key of another type raises WRONGTYPE either way.
  if redis.REDIS_VERSION_NUM then
    holder = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'GET', 'PX', ARGV[2])
    mine = not holder
  else
    mine = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
    if not mine then
      holder = redis.call('GET', KEYS[1])
    end
  end
  if mine and mode == '1' then
    -- An earlier copy of this attempt (re-sent by a client retry) may have queued us: that
    -- entry would be served later, to a waiter that no longer waits or to a holder whose
    -- lease had ended (found by the simulator).
    redis.call('ZREM', KEYS[2], queued)
  end
else
  holder = redis.call('GET', KEYS[1])
end
if holder == ARGV[1] then
  -- Ours: handed to us while we waited, or this very attempt already landed once and a
  -- client retry re-sent it after losing the reply. Take it to our ttl and leave the queue
  -- (without this a retried attempt would give up on a lock it holds, or queue behind it).
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('ZREM', KEYS[2], queued)
  mine = true
end
if not mine and holder == SHARED and readers_live(KEYS[3], now_ms()) == 0 then
  -- Every reader's lease has ended (crashed readers): as free as a missing key.
  redis.call('DEL', KEYS[1])
  holder = false
end
if not mine and not holder then
  -- Free with waiters queued: a holder crashed, or a grantee never took its hand-off.
  -- Serve the queue in order; the lock is ours if we come first or nobody else listens.
  local served = lock_serve(KEYS[1], KEYS[2], KEYS[3], ARGV[5], ARGV[6], 0)
  if served == ARGV[1] or redis.call('EXISTS', KEYS[1]) == 0 then
    if not written('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) then
      return {0, 0}  -- refused on a cluster's slot being moved (moving.lua): ask again soon
    end
    redis.call('ZREM', KEYS[2], queued)
    mine = true
  end
end
if mine then
  if KEYS[4] then
    -- Strictly above every earlier token of this name: the counter, floored by the server's
    -- clock in microseconds so the sequence survives the counter key's expiry.
    local t = redis.call('TIME')
    local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
    local fence = math.max(tonumber(redis.call('GET', KEYS[4]) or '0') + 1, floor)
    redis.call('SET', KEYS[4], string.format('%d', fence), 'PX', ARGV[8])
    return {1, tonumber(ARGV[2]), fence}
  end
  return {1, tonumber(ARGV[2])}
end
local left = redis.call('PTTL', KEYS[1])
if left == -2 then
  left = 0  -- no key: a cluster's slot being moved refused a write (moving.lua): ask again soon
end
if mode ~= '0' then
  -- A writer dropped while readers held the lock (its process seemed gone: a blip in its
  -- subscription) takes its place back at the head.
  queue_join(KEYS[2], queued, ARGV[4], mode == '2', holder == SHARED)
end
return {0, left}
