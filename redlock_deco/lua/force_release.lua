-- Remove a lock or a semaphore whoever holds it (an operator's tool for a stuck holder), then
-- serve its queued waiters as a release would: the lock goes to the oldest waiter still
-- listening, a semaphore's slots to up to its limit of them, each woken up holding it. With
-- nobody left to serve, the queue and the semaphore's limit key are gone too.
-- include: waiters
-- KEYS[1] lease key: a lock's token string, or a semaphore's holders zset
-- KEYS[2] waiter queue (same hash slot); KEYS[3] semaphore limit (same hash slot)
-- ARGV[1] hand-off lease in ms; ARGV[2] '1' if PUBLISH counts prove a waiter gone ('0' on a
--         cluster); ARGV[3] expected kind: 'lock', 'semaphore', or '' for whichever it is
-- returns {1, kind, {token, ms left (-1: no expiry), ...}, {token served, ...}} removed
--       | {0, ''} nothing held (nothing touched: queued waiters find it free at their recheck)
--       | {3, 'string' | 'zset' | 'other'} KEYS[1] is no lock or semaphore of the expected
--           kind (nothing touched)
local expected = ARGV[3]
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0, ''}
end
-- What the key is, found by asking it as each kind (a WRONGTYPE error reply otherwise):
-- TYPE would say it at once, but the least-privilege ACL grants only the commands the
-- library needs anyway (acl.py), and an operator's tool should run under it too.
local token = redis.pcall('GET', KEYS[1])
local members = nil
local kind = 'string'
if type(token) == 'table' and token.err then
  members = redis.pcall('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  kind = (type(members) == 'table' and members.err) and 'other' or 'zset'
end
if kind == 'string' and expected ~= 'semaphore' then
  -- Whatever the token: a redis-py Lock (a uuid, perhaps with no expiry) is as stuck as ours.
  local removed = {token, redis.call('PTTL', KEYS[1])}
  redis.call('DEL', KEYS[1])
  -- The old holder's next renewal or release compares its token, finds another or none,
  -- and reports the lease lost.
  local served = lock_serve(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
  return {1, 'lock', removed, {served}}
end
if kind == 'zset' and expected ~= 'lock' then
  local ours = '^.+:%d+:' .. string.rep('%x', 8) .. ':' .. string.rep('%x', 32) .. '$'
  for i = 1, #members, 2 do
    if not string.match(members[i], ours) then
      return {3, 'zset'}  -- a sorted set of someone else's (a leaderboard?): not ours to drop
    end
  end
  local now = now_ms()
  local removed = {}
  for i = 1, #members, 2 do
    removed[#removed + 1] = members[i]
    removed[#removed + 1] = tonumber(members[i + 1]) - now
  end
  redis.call('DEL', KEYS[1])
  -- The limit of the latest admission; unknown, serve one (the others ask again within a
  -- second and are admitted by their own limit then).
  local limit = tonumber(redis.call('GET', KEYS[3]) or '1')
  sem_serve(KEYS[1], KEYS[2], limit, now, tonumber(ARGV[1]), ARGV[2])
  local served = redis.call('ZRANGE', KEYS[1], 0, -1)
  if #served == 0 then
    redis.call('DEL', KEYS[3])  -- nobody holds it now: leave no key behind
  end
  return {1, 'semaphore', removed, served}
end
return {3, kind}
