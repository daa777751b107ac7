-- Remove a lock or a semaphore whoever holds it (an operator's tool for a stuck holder), then
-- serve its queued waiters as a release would: the lock goes to the oldest waiter still
-- listening, a semaphore's slots to up to its limit of them, each woken up holding it. With
-- nobody left to serve, the queue and the semaphore's limit key are gone too.
-- include: waiters
-- KEYS[1] lease key: a lock's token string, or a semaphore's holders zset
-- KEYS[2] waiter queue (same hash slot); KEYS[3] semaphore limit (same hash slot); KEYS[4] a
--         lock's readers (same hash slot): while they hold it, the lock key says SHARED
-- ARGV[1] the ttl of a queue entry without terms, in ms; ARGV[2] '1' if PUBLISH counts prove a waiter gone ('0' on a
--         cluster); ARGV[3] expected kind: 'lock', 'semaphore', or '' for whichever it is
-- ARGV[4] '1' (force): a string that holds no lock token is removed too
-- ARGV[5] '1': remove only if every holder is among ARGV[6..] (the SHA-1 hex of each token
--         the caller saw); '0': whoever holds it
-- returns {1, kind, {token, ms left (-1: no expiry), ...}, {token served, ...}, recognised}
--           removed; recognised is 0 for a string that held no lock token (forced)
--       | {0, ''} nothing held (nothing touched: queued waiters find it free at their recheck)
--       | {3, 'string' | 'zset' | 'other'} KEYS[1] is no lock or semaphore of the expected
--           kind (nothing touched)
--       | {4, {token, ...}} held by someone not among ARGV[6..] (nothing touched)
--       | {5, ''} a string that holds no lock token, without force (nothing touched)
local expected = ARGV[3]
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0, ''}
end
-- A lock token: ours (host:pid:process id:secret, see _tokens.py), or a redis-py Lock's
-- (uuid.uuid1().hex). Anything else may be an application's value under a mistyped key.
local ours = '^.+:%d+:' .. string.rep('[0-9a-f]', 8) .. ':' .. string.rep('[0-9a-f]', 32) .. '$'
local redis_py = '^' .. string.rep('[0-9a-f]', 32) .. '$'

-- Is any of `tokens` a holder the caller did not see? Then removing would take the lease of
-- one who came since (a holder released, another took it, between showing and confirming).
local function unexpected(tokens)
  if ARGV[5] ~= '1' then
    return false
  end
  local seen = {}
  for i = 6, #ARGV do
    seen[ARGV[i]] = true
  end
  for _, token in ipairs(tokens) do
    if not seen[redis.sha1hex(token)] then
      return true
    end
  end
  return false
end

-- {token, ms of lease left, ...} from a sorted set's {token, end of lease, ...}.
local function lease_ends(members, now)
  local left = {}
  for i = 1, #members, 2 do
    left[#left + 1] = members[i]
    left[#left + 1] = tonumber(members[i + 1]) - now
  end
  return left
end

-- The lock is free now: serve its line as a release would; who was served (a writer, or
-- the readers admitted together).
local function serve_lock()
  local writer = lock_serve(KEYS[1], KEYS[2], KEYS[4], ARGV[1], ARGV[2], 0)
  return writer and {writer} or redis.call('ZRANGE', KEYS[4], 0, -1)
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
if kind == 'string' and expected ~= 'semaphore' and token == SHARED then
  -- Held by readers: every one of them goes.
  members = redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')
  local tokens = {}
  for i = 1, #members, 2 do
    tokens[#tokens + 1] = members[i]
  end
  if unexpected(tokens) then
    return {4, tokens}
  end
  local removed = lease_ends(members, now_ms())
  redis.call('DEL', KEYS[1], KEYS[4])
  return {1, 'lock', removed, serve_lock(), 1}
end
if kind == 'string' and expected ~= 'semaphore' then
  -- A redis-py Lock (a uuid, perhaps with no expiry) is as stuck as ours.
  local recognised = string.match(token, ours) or string.match(token, redis_py)
  if not recognised and ARGV[4] ~= '1' then
    return {5, ''}
  end
  if unexpected({token}) then
    return {4, {token}}
  end
  local removed = {token, redis.call('PTTL', KEYS[1])}
  redis.call('DEL', KEYS[1])
  -- The old holder's next renewal or release compares its token, finds another or none,
  -- and reports the lease lost.
  return {1, 'lock', removed, serve_lock(), recognised and 1 or 0}
end
if kind == 'zset' and expected ~= 'lock' then
  local tokens = {}
  for i = 1, #members, 2 do
    if not string.match(members[i], ours) then
      return {3, 'zset'}  -- a sorted set of someone else's (a leaderboard?): not ours to drop
    end
    tokens[#tokens + 1] = members[i]
  end
  if unexpected(tokens) then
    return {4, tokens}
  end
  local now = now_ms()
  local removed = lease_ends(members, now)
  redis.call('DEL', KEYS[1])
  -- Each waiter is admitted within its own limit (an entry without terms: the limit of the
  -- latest admission, or one).
  local limit = redis.call('GET', KEYS[3]) or '1'
  sem_serve(KEYS[1], KEYS[2], KEYS[3], now, ARGV[1], limit, ARGV[2])
  local served = redis.call('ZRANGE', KEYS[1], 0, -1)
  if #served == 0 then
    redis.call('DEL', KEYS[3])  -- nobody holds it now: leave no key behind
  end
  return {1, 'semaphore', removed, served, 1}
end
return {3, kind}
