-- Take one slot of a counting semaphore, or report when the earliest lease ends.
-- include: waiters
-- KEYS[1] holders zset: token -> end of its lease, in server-clock ms (never a client clock)
-- KEYS[2] waiter zset of this semaphore; KEYS[3] signal list of this semaphore (same slot)
-- KEYS[4] the limit of the latest admission, for `inspect` (expires with the holders)
-- ARGV[1] token; ARGV[2] lease ttl in ms
-- ARGV[3] waiter window in ms: 0 = try once (never joins the waiters), else join on failure
-- ARGV[4] limit: this caller's own limit, applied at its admission
-- returns {1, ttl ms} acquired | {0, ms until the earliest lease ends}
local ttl = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local now = now_ms()
-- Holders whose lease has ended (crashed, or never renewed) give their slot back here.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
-- A token already among the holders is this very attempt, re-sent after a lost reply.
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[4]) or redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  if redis.call('PTTL', KEYS[1]) < ttl then
    -- The zset lives exactly as long as its longest lease: no key outlives its holders.
    redis.call('PEXPIRE', KEYS[1], ttl)
  end
  redis.call('SET', KEYS[4], ARGV[4], 'PX', redis.call('PTTL', KEYS[1]))
  if window > 0 then
    waiter_leave(KEYS[2], KEYS[3], ARGV[1])
  end
  return {1, ttl}
end
if window > 0 then
  waiter_join(KEYS[2], ARGV[1], window, now)
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, tonumber(first[2]) - now}
