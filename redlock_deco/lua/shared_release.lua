-- Give back a reader's share of a token lock if, and only if, its lease is still listed; the
-- last reader out hands the lock to the queued writer (or frees it).
-- include: waiters
-- KEYS[1] lock key; KEYS[2] waiter queue; KEYS[3] readers
-- ARGV[1] token; ARGV[2] the ttl of a queue entry without terms, in ms; ARGV[3] '1' if
-- PUBLISH counts prove a waiter gone ('0' on a cluster); ARGV[4] '1' if the caller was a
-- waiter giving up: leave the queue first (and pass on a share handed to us meanwhile);
-- ARGV[5] the caller's queue entry (token and terms, see waiters.lua)
-- returns 1 released | 0 its lease had ended (listed past its end), or the lock key no longer
--           says SHARED (taken away) | 2 not listed (ended and swept, removed -- or this very
--           release, re-sent by a client retry after its reply was lost, already ran)
if ARGV[4] == '1' then
  redis.call('ZREM', KEYS[2], ARGV[5])
end
local ends = redis.call('ZSCORE', KEYS[3], ARGV[1])
if not ends then
  return 2
end
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('GET', KEYS[1]) ~= SHARED then
  return 0  -- the lock key went (and maybe came to another): nothing else is ours to touch
end
local now = now_ms()
local live = readers_live(KEYS[3], now)
if live == 0 then
  redis.call('DEL', KEYS[1])
else
  readers_settle(KEYS[1], KEYS[3], now)  -- ours may have been the longest lease
end
lock_serve(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], live)
if tonumber(ends) <= now then
  return 0
end
return 1
