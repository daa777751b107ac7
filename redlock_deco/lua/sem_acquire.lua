-- Take one slot of a counting semaphore, or queue for one and report when the earliest lease
-- ends.
-- include: waiters
-- KEYS[1] holders zset: token -> end of its lease, in server-clock ms (never a client clock)
-- KEYS[2] waiter queue of this semaphore (same slot)
-- KEYS[3] the limit of the latest admission, for `inspect` (expires with the holders)
-- ARGV[1] token; ARGV[2] lease ttl in ms
-- ARGV[3] mode: 0 try once (never queues); 1 queue if full; 2 again: this waiter queued
--         before, so it may have been handed a slot, and it keeps its place in the queue
-- ARGV[4] queue window in ms; ARGV[5] the ttl of a queue entry without terms, in ms;
-- ARGV[6] '1' if PUBLISH counts prove a waiter gone, '0' on a cluster
-- ARGV[7] limit: this caller's own limit, applied at its admission (and to its queue entry)
-- returns {1, ttl ms} acquired | {0, ms until the earliest lease ends}
local ttl = tonumber(ARGV[2])
local mode = ARGV[3]
local limit = tonumber(ARGV[7])
local now = now_ms()
local queued = entry(ARGV[1], ARGV[2], ARGV[7])
-- Holders whose lease has ended (crashed, or never renewed) give their slot back here, and
-- a free slot goes to the queue first, in order. `waiting`: whether anyone is left queued,
-- known only if the queue was served here (nil: not looked at).
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local count = redis.call('ZCARD', KEYS[1])
local waiting = nil
if count < limit then
  local admitted
  admitted, waiting = sem_serve(KEYS[1], KEYS[2], KEYS[3], now, ARGV[5], ARGV[7], ARGV[6])
  count = count + admitted
end
-- Listed already, in any mode: handed to us, or a client retry re-sent an attempt that had
-- landed (a retried first attempt must not queue behind its own slot). Otherwise a slot is
-- ours only behind nobody: a waiter the serve left queued is held back by its own, smaller
-- limit (callers that disagree on limit), and admitting whoever comes after it would
-- starve it (found in review). On a cluster, where PUBLISH counts prove nothing and a dead
-- waiter could hold the line forever, a free slot goes to whoever asks, as before. (A free
-- slot behind nobody needs no ZSCORE: the ZADD below is the same for a listed token.)
local behind = ARGV[6] == '1' and waiting
if (count < limit and not behind) or redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  if not written('ZADD', KEYS[1], now + ttl, ARGV[1]) then
    return {0, 0}  -- refused on a cluster's slot being moved (moving.lua): ask again soon
  end
  local lives = 0  -- a zset that was empty is new: no expiry yet
  if count > 0 then
    lives = redis.call('PTTL', KEYS[1])
  end
  if lives < ttl then
    -- The zset lives exactly as long as its longest lease: no key outlives its holders.
    redis.call('PEXPIRE', KEYS[1], ttl)
    lives = ttl
  end
  redis.call('SET', KEYS[3], ARGV[7], 'PX', lives)
  if mode ~= '0' and waiting ~= false then
    -- (A queue seen empty above holds no entry of ours to take out.)
    redis.call('ZREM', KEYS[2], queued)
  end
  return {1, ttl}
end
if mode ~= '0' then
  queue_join(KEYS[2], queued, ARGV[4], mode == '2')
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, (tonumber(first[2]) or now) - now}  -- (none: a slot being moved refused ours)
