-- Release a token lock if, and only if, the caller still owns it; wake one waiter.
-- include: waiters
-- KEYS[1] lock key; KEYS[2] waiter zset; KEYS[3] signal list
-- ARGV[1] token
-- returns 1 released | 0 held by another token (taken over: nothing was touched)
--       | 2 no such key (expired, deleted -- or this very release, re-sent by a client
--           retry after its reply was lost, already ran)
local holder = redis.call('GET', KEYS[1])
if holder ~= ARGV[1] then
  if holder then
    return 0
  end
  return 2
end
redis.call('DEL', KEYS[1])
wake(KEYS[2], KEYS[3], 1)
return 1
