-- Give back a semaphore slot if, and only if, the caller's lease on it is still live, handing
-- the freed slot to the first queued waiter still listening.
-- include: waiters
-- KEYS[1] holders zset; KEYS[2] waiter queue; KEYS[3] limit
-- ARGV[1] token; ARGV[2] the ttl of a queue entry without terms, in ms; ARGV[3] '1' if
-- PUBLISH counts prove a waiter gone ('0' on a cluster); ARGV[4] '1' if the caller was a
-- waiter giving up: leave the queue first (and pass on a slot handed to us meanwhile);
-- ARGV[5] the caller's queue entry (token and terms, see waiters.lua); ARGV[6] the caller's
-- limit (the limit of a queue entry without terms)
-- returns 1 released | 0 its lease had ended (still listed, past its end)
--       | 2 not listed (ended and swept, removed -- or this very release, re-sent by a client
--           retry after its reply was lost, already ran)
if ARGV[4] == '1' then
  redis.call('ZREM', KEYS[2], ARGV[5])
end
local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])
if ends then
  redis.call('ZREM', KEYS[1], ARGV[1])
end
local now = now_ms()
-- Holders whose lease has ended give their slot back too, before the queue is served.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
-- Served even when this token held nothing: a waiter giving up may have been the head, held
-- back by its own smaller limit, and the waiter behind it may fit a free slot now (review 9,
-- 04: it slept until its own recheck, ~0.6 s, with a slot free).
sem_serve(KEYS[1], KEYS[2], KEYS[3], now, ARGV[2], ARGV[6], ARGV[3])
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[3])  -- the last holder left: leave no key behind
end
if not ends then
  return 2
end
if tonumber(ends) <= now then
  return 0
end
return 1
