-- Take a token lock in shared (read) mode, or queue for it and report how long the lease
-- that blocks us has left.
-- include: waiters
-- KEYS[1] lock key (a writer's token, or SHARED while readers hold it); KEYS[2] waiter
--         queue (same hash slot); KEYS[3] readers: token -> end of its lease, server-clock ms
-- ARGV[1] token (a reader's: it ends in '/r'); ARGV[2] lease ttl in ms
-- ARGV[3] mode: 0 try once (never queues); 1 queue if busy; 2 again: this waiter queued
--         before, so it may have been admitted, and it keeps its place in the queue
-- ARGV[4] queue window in ms; ARGV[5] the ttl of a queue entry without terms, in ms;
-- ARGV[6] '1' if PUBLISH counts prove a waiter gone, '0' on a cluster; ARGV[7] limit (1: part
--         of the queue entry)
-- returns {1, ttl ms} acquired
--       | {0, ms until the blocking lease ends (a writer's, or the longest reader's), or -1}
local token = ARGV[1]
local ttl = tonumber(ARGV[2])
local mode = ARGV[3]
local now = now_ms()
local queued = entry(token, ARGV[2], ARGV[7])
local holder = redis.call('GET', KEYS[1])  -- a key of another type raises WRONGTYPE here
local live = 0
if holder == SHARED then
  live = readers_live(KEYS[3], now)
  if live == 0 then
    redis.call('DEL', KEYS[1])  -- every reader's lease has ended
    holder = false
  end
elseif not holder then
  redis.call('DEL', KEYS[3])  -- readers outliving the lock key were force-released: none is in
end
if not holder or holder == SHARED then
  -- Admitted already (handed to us, or a client retry re-sent an attempt that had landed)?
  local admitted = redis.call('ZSCORE', KEYS[3], token)
  if not admitted and redis.call('EXISTS', KEYS[2]) == 1 then
    -- Nobody writes, yet waiters queue (a holder crashed, a grantee never came, a writer
    -- gave up): serve them in order first, as a release would, ourselves perhaps among them.
    lock_serve(KEYS[1], KEYS[2], KEYS[3], ARGV[5], ARGV[6], live)
    admitted = redis.call('ZSCORE', KEYS[3], token)
    holder = redis.call('GET', KEYS[1])
  end
  -- A reader comes in at once only behind nobody: a queued writer (the queue's head) stops
  -- new readers, or a stream of them would starve it.
  if admitted or ((not holder or holder == SHARED) and redis.call('EXISTS', KEYS[2]) == 0) then
    if not written('ZADD', KEYS[3], now + ttl, token) then
      return {0, 0}  -- refused on a cluster's slot being moved (moving.lua): ask again soon
    end
    readers_settle(KEYS[1], KEYS[3], now)
    if mode ~= '0' then
      redis.call('ZREM', KEYS[2], queued)
    end
    return {1, ttl}
  end
end
local left = redis.call('PTTL', KEYS[1])
if left == -2 then
  left = 0  -- no key: a cluster's slot being moved refused a write (moving.lua): ask again soon
end
if mode ~= '0' then
  queue_join(KEYS[2], queued, ARGV[4], mode == '2')
end
return {0, left}
