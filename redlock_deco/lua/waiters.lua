-- The waiter queue and the hand-off, shared by the lock and semaphore scripts: the loader
-- prepends this file to every script whose header says "-- include: waiters".
--
-- Waiters queue in arrival order in a sorted set: the member is the waiter's entry, the score
-- its place, one after the last waiter's when it joined (ZADD NX to join, ZPOPMIN to serve).
-- No step on it walks the queue (each is O(log n)): a LIST needed LPOS to keep a token from
-- being queued twice, and its cost grew with the queue (33 us a join at 1,000 waiters,
-- against 1 at one: issue 25's hand-off as the queue grows). A release does not
-- wake waiters to race for what it freed: it hands the lease to the head waiter directly, on
-- that waiter's own terms, and PUBLISHes the grant on its process's channel,
-- "redlock-deco:" .. the token's holder part, where that process's one subscriber passes it
-- to the waiting thread or task (or, if nobody there waits for it any more, gives it back).
-- The grantee wakes up holding the lease.
--
-- A queue entry is the waiter's token and its terms, "<token>|<ttl ms>|<limit>" (a lock's
-- limit is 1): a grant gives the grantee its own ttl from that moment, so a grantee stalled
-- right after the grant keeps the lease it asked for and a grantee killed right after it
-- frees the lock within its own ttl; a semaphore admits a waiter only within its own limit.
-- A token is queued at most once, whatever a client retry re-sends: a second entry would be
-- served again later and hand the key back to a holder whose lease had ended, silently.
--
-- PUBLISH answers how many subscribers heard the grant. 0 means the waiter's process is gone
-- (a killed process's connections are closed), so the next waiter is served instead. On a
-- cluster the count covers one node only: the caller then says a 0 proves nothing.

-- A write of the hand-off: its reply, or false if a cluster's slot being moved refused it
-- (nothing done: see moving.lua), so that a grant is written before it is told, or not at all.
local function written(...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err then
    if string.find(reply.err, 'non local key', 1, true) then
      return false
    end
    return redis.call(...)  -- raised as redis.call raises it (nothing ran)
  end
  return reply
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The queue entry of a waiter: its token and its own terms.
local function entry(token, ttl, limit)
  return token .. '|' .. ttl .. '|' .. limit
end

-- An entry's token, ttl (ms) and limit; an entry without terms (queued by a version before
-- them) takes the given ones.
local function terms(item, ttl, limit)
  local token, own_ttl, own_limit = string.match(item, '^(.-)|(%d+)|(%d+)$')
  if not token then
    return item, tonumber(ttl), tonumber(limit)
  end
  return token, tonumber(own_ttl), tonumber(own_limit)
end

-- Tell the waiter holding `token` that it has been served; false if provably nobody heard.
-- The message names what was granted ("<token> <kind> <key>", kind L lock, R reader, S
-- semaphore slot), so a process where nobody waits for it any more can give it back at once.
local function told(token, counted, kind, key)
  local holder = string.match(token, '^(.*):') or token
  -- pcall: a user whose ACL lacks the channel must still be able to release.
  local heard = redis.pcall('PUBLISH', 'redlock-deco:' .. holder, token .. ' ' .. kind .. ' ' .. key)
  return counted == '0' or type(heard) ~= 'number' or heard > 0
end

-- Queue `item` (a waiter's entry) at most once -- a waiter checking again keeps its place,
-- and a join re-sent by a client retry after its reply was lost changes nothing (ZADD NX
-- leaves a member that is there as it is) -- and keep the queue as long as its newest waiter
-- may stay without checking again. `front`: a waiter checking again whose entry went goes
-- back to the head (it was ahead of everyone queued since).
local function queue_join(queue, item, window, again, front)
  local place
  if again and front then
    local first = redis.call('ZRANGE', queue, 0, 0, 'WITHSCORES')
    place = (tonumber(first[2]) or 1) - 1
  else
    local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
    place = (tonumber(last[2]) or 0) + 1
  end
  -- (A queue this very script emptied, on a cluster's slot being moved, takes no entry:
  -- the waiter joins at its next check. See moving.lua.)
  if written('ZADD', queue, 'NX', place, item) then
    redis.call('PEXPIRE', queue, window)
  end
end

-- The entry at the head of the queue (nil if nobody queues), left in place.
local function queue_head(queue)
  return redis.call('ZRANGE', queue, 0, 0)[1]
end

-- The entry at the head of the queue, taken out, and its place (nil if nobody queues).
local function queue_pop(queue)
  local popped = redis.call('ZPOPMIN', queue)
  return popped[1], popped[2]
end

-- A token lock's readers (shared holders) live in a sorted set beside it, token -> end of
-- its lease in server-clock ms, while the lock key holds SHARED (never a token) and lives
-- exactly as long as the longest of those leases: so a plain SET NX, redis-py's Lock
-- included, finds the key taken while anyone reads. Readers' tokens end in '/r', which is
-- how the queue tells a waiting reader from a waiting writer.
local SHARED = 'redlock-deco:shared'

local function reads(token)
  return string.sub(token, -2) == '/r'
end

-- Drop readers whose lease has ended (crashed, or never renewed); how many remain.
local function readers_live(readers, now)
  redis.call('ZREMRANGEBYSCORE', readers, '-inf', now)
  return redis.call('ZCARD', readers)
end

-- After readers came or went: the lock key holds SHARED for exactly as long as the longest
-- reader's lease, the readers' set too; with no reader left, both go (if no writer took the
-- key meanwhile). Returns how many read.
local function readers_settle(key, readers, now)
  local last = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')
  if #last == 0 then
    if redis.call('GET', key) == SHARED then
      redis.call('DEL', key)
    end
    return 0
  end
  local left = math.max(1, tonumber(last[2]) - now)
  redis.call('SET', key, SHARED, 'PX', left)
  redis.call('PEXPIRE', readers, left)
  return redis.call('ZCARD', readers)
end

-- Is the process of the waiter holding `token` still subscribed to its grants? Asked without
-- granting anything (PUBLISH would be a grant); like PUBLISH counts, only where they count.
local function listens(token, counted)
  if counted == '0' then
    return true
  end
  local holder = string.match(token, '^(.*):') or token
  local found = redis.pcall('PUBSUB', 'NUMSUB', 'redlock-deco:' .. holder)
  return type(found) ~= 'table' or found.err ~= nil or tonumber(found[2]) > 0
end

-- The lock is free, or only read (`live` readers, already swept): serve the queue in order,
-- as a release does, each waiter on its own terms. Readers at its head are admitted together
-- (each with its own ttl); a writer at its head is handed the lock once nobody reads, and
-- blocks every reader queued behind it until then -- unless its process is gone, or a killed
-- writer would keep new readers out for as long as the current ones read. `handoff`: the
-- ttl of an entry without terms. Returns the writer's token if one was handed the lock (else
-- nil), and how many read now (the key then holds SHARED if any do).
local function lock_serve(key, queue, readers, handoff, counted, live)
  local now = nil
  while true do
    local head, place  -- place: the popped entry's score (nil: only peeked, still queued)
    if live > 0 then
      -- Peeked, not popped, first: a writer left waiting keeps its place, and the queue its
      -- expiry (a queue popped empty and joined again would have none).
      head = queue_head(queue)
      if not head then
        break
      end
      local token = terms(head, handoff, 1)
      if not reads(token) and listens(token, counted) then
        break  -- a writer waits: for the readers to leave
      end
    else
      head, place = queue_pop(queue)
      if not head then
        break
      end
    end
    local token, ttl = terms(head, handoff, 1)
    -- Each grant is written before it is told. A cluster's slot being moved may refuse the
    -- write (moving.lua): then nobody is told, the entry keeps its place (put back, if it
    -- was popped and the queue is still there), and the waiter asks again at its next check.
    if reads(token) then
      now = now or now_ms()
      local new = written('ZADD', readers, now + ttl, token)
      if not new then
        if place then
          written('ZADD', queue, 'NX', place, head)
        end
        break
      end
      if told(token, counted, 'R', key) then
        live = live + 1
      elseif new == 1 then
        redis.call('ZREM', readers, token)
      end
    elseif live == 0 then
      if not written('SET', key, token, 'PX', ttl) then
        written('ZADD', queue, 'NX', place, head)
        break
      end
      if told(token, counted, 'L', key) then
        return token, 0
      end
      redis.call('DEL', key)
    end
    if not place then
      queue_pop(queue)  -- peeked: out now (admitted, or a writer whose process is gone)
    end
  end
  if live > 0 then
    readers_settle(key, readers, now or now_ms())
  end
  return nil, live
end

-- Hand free slots to queued waiters still listening, in order, each within its own limit
-- and for its own ttl: the head waits while the holders (live ones: the caller swept) are as
-- many as its limit, and so does everyone behind it. `handoff` and `limit`: the terms of an
-- entry without its own. `limits`: the key kept for `inspect`, set to each admission's limit.
-- Returns how many holders it added, and whether anyone is still queued.
local function sem_serve(holders, queue, limits, now, handoff, limit, counted)
  local added = 0
  while true do
    local head = queue_head(queue)
    if not head then
      return added, false
    end
    local token, ttl, own_limit = terms(head, handoff, limit)
    if redis.call('ZCARD', holders) >= own_limit then
      if listens(token, counted) then
        return added, true  -- held back by its own limit, and everyone behind it with it
      end
      queue_pop(queue)  -- its process is gone: it must not hold the line
    else
      local new = written('ZADD', holders, now + ttl, token)  -- written, then told (above)
      if not new then
        return added, true  -- (still queued, it asks again at its next check)
      end
      queue_pop(queue)
      if not told(token, counted, 'S', holders) then
        if new == 1 then
          redis.call('ZREM', holders, token)
        end
      else
        added = added + new
        local lives = redis.call('PTTL', holders)
        if lives < ttl then
          -- The zset lives exactly as long as its longest lease: no key outlives its holders.
          redis.call('PEXPIRE', holders, ttl)
          lives = ttl
        end
        redis.call('SET', limits, own_limit, 'PX', lives)
      end
    end
  end
end
