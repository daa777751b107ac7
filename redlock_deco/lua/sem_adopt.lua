-- Take over a semaphore slot under a new token if, and only if, the old token's lease on it
-- is still live: the old token's late renewals and releases then find nothing of theirs.
-- include: waiters
-- KEYS[1] holders zset; KEYS[2] limit (its expiry follows the holders')
-- ARGV[1] the token holding the slot; ARGV[2] the adopter's new token; ARGV[3] new lease
-- ttl in ms
-- returns 1 adopted (also when the new token holds a live slot already: this command's first
--   run, its reply lost and the command re-sent) | 0 not a live holder (nothing touched)
local ttl = tonumber(ARGV[3])
local now = now_ms()
local mine = redis.call('ZSCORE', KEYS[1], ARGV[2])
if mine and tonumber(mine) > now then
  return 1  -- review 9, 01: the re-sent copy answered 0, and nobody knew the new token
end
local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not ends or tonumber(ends) <= now then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[2])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return 1
