-- Reset the lease on a semaphore slot if, and only if, it is still live.
-- include: waiters
-- KEYS[1] holders zset; KEYS[2] limit (its expiry follows the holders')
-- ARGV[1] token; ARGV[2] new lease ttl in ms
-- returns 1 extended | 0 not a holder (its lease had ended or the slot was taken away)
local ttl = tonumber(ARGV[2])
local now = now_ms()
local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not ends or tonumber(ends) <= now then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return 1
