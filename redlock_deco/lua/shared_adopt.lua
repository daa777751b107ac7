-- Take over a reader's lease under a new token if, and only if, the old token's lease is
-- still live: the old token's late renewals and releases then find nothing of theirs.
-- include: waiters
-- KEYS[1] lock key; KEYS[2] readers
-- ARGV[1] the reader token holding it; ARGV[2] the adopter's new reader token; ARGV[3] new
-- lease ttl in ms
-- returns 1 adopted | 0 not a live reader (nothing was touched)
local ttl = tonumber(ARGV[3])
local now = now_ms()
if redis.call('GET', KEYS[1]) ~= SHARED then
  return 0
end
local ends = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not ends or tonumber(ends) <= now then
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[2], now + ttl, ARGV[2])
readers_settle(KEYS[1], KEYS[2], now)  -- both keys live as long as the longest reader
return 1
