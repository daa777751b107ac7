-- Release a token lock if, and only if, the caller still owns it; wake one waiter.
-- include: waiters
-- KEYS[1] lock key; KEYS[2] waiter zset; KEYS[3] signal list
-- ARGV[1] token
-- returns 1 released | 0 not the owner (expired or taken over: nothing was touched)
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
wake(KEYS[2], KEYS[3], 1)
return 1
