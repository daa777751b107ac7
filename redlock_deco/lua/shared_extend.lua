-- Reset a reader's lease if, and only if, it is still live.
-- include: waiters
-- KEYS[1] lock key; KEYS[2] readers
-- ARGV[1] token; ARGV[2] new lease ttl in ms
-- returns 1 extended | 0 not a reader (its lease had ended or was taken away)
local ttl = tonumber(ARGV[2])
local now = now_ms()
if redis.call('GET', KEYS[1]) ~= SHARED then
  return 0
end
local ends = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not ends or tonumber(ends) <= now then
  return 0
end
redis.call('ZADD', KEYS[2], 'XX', now + ttl, ARGV[1])
-- Both keys live exactly as long as the longest reader's lease: longer after a longer ttl,
-- shorter after a shorter one (this may have been the longest).
readers_settle(KEYS[1], KEYS[2], now)
return 1
