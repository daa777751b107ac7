-- Take over a reader's lease under a new token if, and only if, the old token's lease is
-- still live: the old token's late renewals and releases then find nothing of theirs.
-- include: waiters
-- KEYS[1] lock key; KEYS[2] readers
-- ARGV[1] the reader token holding it; ARGV[2] the adopter's new reader token; ARGV[3] new
-- lease ttl in ms
-- returns 1 adopted (also when the new token is a live reader already: this command's first
--   run, its reply lost and the command re-sent) | 0 not a live reader (nothing touched)
local ttl = tonumber(ARGV[3])
local now = now_ms()
if redis.call('GET', KEYS[1]) ~= SHARED then
  return 0
end
local mine = redis.call('ZSCORE', KEYS[2], ARGV[2])
if mine and tonumber(mine) > now then
  return 1  -- review 9, 01: the re-sent copy answered 0, and nobody knew the new token
end
local ends = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not ends or tonumber(ends) <= now then
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[2], now + ttl, ARGV[2])
readers_settle(KEYS[1], KEYS[2], now)  -- both keys live as long as the longest reader
return 1
