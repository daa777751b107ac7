-- Take over a token lock's lease under a new token if, and only if, the old token holds it
-- now: whatever the old token's holder still sends afterwards (a renewal in flight, a late
-- release) finds another token and touches nothing.
-- include: waiters
-- KEYS[1] lock key
-- ARGV[1] the token holding it; ARGV[2] the adopter's new token; ARGV[3] new lease ttl in ms
-- returns 1 adopted (also when the new token holds it already: this command's first run,
--   its reply lost and the command re-sent) | 0 not held by that token (nothing touched)
local held_by = redis.call('GET', KEYS[1])
if held_by == ARGV[2] then
  return 1  -- review 9, 01: the re-sent copy answered 0, and nobody knew the new token
end
if ARGV[1] == SHARED or held_by ~= ARGV[1] then
  return 0  -- (the readers' marker is no holder's token)
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
