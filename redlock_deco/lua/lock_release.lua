-- Release a token lock if, and only if, the caller still owns it, handing it to the first
-- queued waiter still listening (the key then holds that waiter's token).
-- include: waiters
-- KEYS[1] lock key; KEYS[2] waiter queue
-- ARGV[1] token; ARGV[2] hand-off lease in ms; ARGV[3] '1' if PUBLISH counts prove a waiter
-- gone ('0' on a cluster); ARGV[4] '1' if the caller was a waiter giving up: leave the queue
-- first (and pass on a hand-off that reached us meanwhile)
-- returns 1 released | 0 held by another token (taken over: nothing was touched)
--       | 2 no such key (expired, deleted -- or this very release, re-sent by a client
--           retry after its reply was lost, already ran)
if ARGV[4] == '1' then
  redis.call('LREM', KEYS[2], 0, ARGV[1])
end
local holder = redis.call('GET', KEYS[1])
if holder ~= ARGV[1] then
  if holder then
    return 0
  end
  return 2
end
if not lock_serve(KEYS[1], KEYS[2], ARGV[2], ARGV[3]) then
  redis.call('DEL', KEYS[1])
end
return 1
