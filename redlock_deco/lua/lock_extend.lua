-- Reset a token lock's lease if, and only if, the caller still owns it.
-- KEYS[1] lock key
-- ARGV[1] token; ARGV[2] new lease ttl in ms
-- returns 1 extended | 0 not the owner (expired or taken over: nothing was touched)
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
