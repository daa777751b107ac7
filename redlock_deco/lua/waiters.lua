-- The waiter queue and the hand-off, shared by the lock and semaphore scripts: the loader
-- prepends this file to every script whose header says "-- include: waiters".
--
-- Waiters queue in arrival order in a LIST (RPUSH to join, LPOP to serve). A release does not
-- wake waiters to race for what it freed: it hands the lease to the head waiter directly (a
-- short hand-off lease in the waiter's name) and PUBLISHes the waiter's token on its
-- process's channel, "redlock-deco:" .. the token's holder part, where that process's one
-- subscriber passes it to the waiting thread or task. The grantee wakes up holding the lease
-- and extends it to its own ttl (its first renewal, or at once when it needs a fencing token,
-- replicas or has no renewer); one that never does lets it go after the hand-off lease.
--
-- PUBLISH answers how many subscribers heard the grant. 0 means the waiter's process is gone
-- (a killed process's connections are closed), so the next waiter is served instead. On a
-- cluster the count covers one node only: the caller then says a 0 proves nothing.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Tell the waiter holding `token` that it has been served; false if provably nobody heard.
local function told(token, counted)
  local holder = string.match(token, '^(.*):') or token
  -- pcall: a user whose ACL lacks the channel must still be able to release.
  local heard = redis.pcall('PUBLISH', 'redlock-deco:' .. holder, token)
  return counted == '0' or type(heard) ~= 'number' or heard > 0
end

-- Queue `token` (once: a waiter checking again keeps its place) and keep the queue as long as
-- its newest waiter may stay without checking again. `front`: a waiter checking again whose
-- entry went goes back to the head (it was ahead of everyone queued since).
local function queue_join(queue, token, window, again, front)
  if not again or not redis.call('LPOS', queue, token) then
    if again and front then
      redis.call('LPUSH', queue, token)
    else
      redis.call('RPUSH', queue, token)
    end
  end
  redis.call('PEXPIRE', queue, window)
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
-- as a release does. Readers at its head are admitted together (each with a hand-off lease
-- of its own); a writer at its head is handed the lock once nobody reads, and blocks every
-- reader queued behind it until then -- unless its process is gone, or a killed writer would
-- keep new readers out for as long as the current ones read. Returns the writer's token if
-- one was handed the lock.
local function lock_serve(key, queue, readers, handoff, counted, live)
  local now = nil
  while true do
    local head
    if live > 0 then
      -- Peeked, not popped, first: a writer left waiting keeps its place, and the queue its
      -- expiry (a list popped empty and pushed again would have none).
      head = redis.call('LINDEX', queue, 0)
      if not head or (not reads(head) and listens(head, counted)) then
        break  -- nobody waits, or a writer does: for the readers to leave
      end
      redis.call('LPOP', queue)
    else
      head = redis.call('LPOP', queue)
      if not head then
        break
      end
    end
    if reads(head) then
      if told(head, counted) then
        now = now or now_ms()
        redis.call('ZADD', readers, now + tonumber(handoff), head)
        live = live + 1
      end
    elseif live == 0 and told(head, counted) then
      redis.call('SET', key, head, 'PX', handoff)
      return head
    end
  end
  if live > 0 then
    readers_settle(key, readers, now or now_ms())
  end
  return nil
end

-- Hand up to `free` free slots to queued waiters still listening.
local function sem_serve(holders, queue, free, now, handoff, counted)
  local served = 0
  while served < free do
    local head = redis.call('LPOP', queue)
    if not head then
      break
    end
    if told(head, counted) then
      redis.call('ZADD', holders, now + handoff, head)
      served = served + 1
    end
  end
  if served > 0 and redis.call('PTTL', holders) < handoff then
    redis.call('PEXPIRE', holders, handoff)
  end
end
