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
-- its newest waiter may stay without checking again.
local function queue_join(queue, token, window, again)
  if not again or not redis.call('LPOS', queue, token) then
    redis.call('RPUSH', queue, token)
  end
  redis.call('PEXPIRE', queue, window)
end

-- Hand the free lock to the first queued waiter still listening: its token, or nil.
local function lock_serve(key, queue, handoff, counted)
  while true do
    local head = redis.call('LPOP', queue)
    if not head then
      return nil
    end
    if told(head, counted) then
      redis.call('SET', key, head, 'PX', handoff)
      return head
    end
  end
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
