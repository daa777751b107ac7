-- Release a token lock if, and only if, the caller still owns it, handing it to the first
-- queued waiter still listening (the key then holds that waiter's token), or admitting the
-- readers queued first (the key then holds SHARED).
-- include: waiters
-- KEYS[1] lock key; KEYS[2] waiter queue; KEYS[3] its readers
-- ARGV[1] token; ARGV[2] the ttl of a queue entry without terms, in ms; ARGV[3] '1' if
-- PUBLISH counts prove a waiter gone ('0' on a cluster); ARGV[4] '1' if the caller was a
-- waiter giving up: leave the queue first (and pass on a hand-off that reached us meanwhile);
-- ARGV[5] the caller's queue entry (token and terms, see waiters.lua)
-- returns 1 released | 0 held by another token (taken over: nothing was touched)
--       | 2 no such key (expired, deleted -- or this very release, re-sent by a client
--           retry after its reply was lost, already ran)
if ARGV[4] == '1' then
  redis.call('ZREM', KEYS[2], ARGV[5])
end
local holder = redis.call('GET', KEYS[1])
if holder ~= ARGV[1] then
  if holder == SHARED and ARGV[4] == '1' then
    -- A writer gave up waiting while others read: readers queued behind it come in now
    -- (they would, at their next check, within a second).
    local live = readers_live(KEYS[3], now_ms())
    if live == 0 then
      redis.call('DEL', KEYS[1])
    end
    lock_serve(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], live)
  end
  if holder then
    return 0
  end
  return 2
end
-- Serve the queue first: a hand-off overwrites our token with the grantee's, admitted
-- readers with SHARED, so the key is deleted only when nobody was served (one command less
-- per contended critical section than a DEL before every hand-off).
local served, live = lock_serve(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], 0)
if not served and live == 0 then
  redis.call('DEL', KEYS[1])
end
return 1
