-- Does the caller still hold a live slot of this semaphore? Read-only.
-- include: waiters
-- KEYS[1] holders zset
-- ARGV[1] token
-- returns 1 holder | 0 not a holder
local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])
if ends and tonumber(ends) > now_ms() then
  return 1
end
return 0
