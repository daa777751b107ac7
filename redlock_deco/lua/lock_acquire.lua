-- Take a token lock, or report how long its holder's lease has left.
-- include: waiters
-- KEYS[1] lock key (a plain string holding the owner's token, as redis-py's Lock uses)
-- KEYS[2] waiter zset of this lock; KEYS[3] signal list of this lock (same hash slot)
-- ARGV[1] token; ARGV[2] lease ttl in ms
-- ARGV[3] waiter window in ms: 0 = try once (never joins the waiters), else join on failure
-- returns {1, ttl ms} acquired | {0, ms until the holder's lease ends, or -1 if it never ends}
local window = tonumber(ARGV[3])
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if window > 0 then
    waiter_leave(KEYS[2], KEYS[3], ARGV[1])
  end
  return {1, tonumber(ARGV[2])}
end
if window > 0 then
  waiter_join(KEYS[2], ARGV[1], window, now_ms())
end
return {0, redis.call('PTTL', KEYS[1])}
