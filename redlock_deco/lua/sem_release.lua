-- Give back a semaphore slot if, and only if, the caller's lease on it is still live; wake one
-- waiter for the freed slot.
-- include: waiters
-- KEYS[1] holders zset; KEYS[2] waiter zset; KEYS[3] signal list; KEYS[4] limit
-- ARGV[1] token
-- returns 1 released | 0 its lease had ended (still listed, past its end)
--       | 2 not listed (ended and swept, removed -- or this very release, re-sent by a client
--           retry after its reply was lost, already ran)
local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not ends then
  return 2
end
redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[4])  -- the last holder left: leave no key behind
end
wake(KEYS[2], KEYS[3], 1)
if tonumber(ends) <= now_ms() then
  return 0
end
return 1
