-- Take a token lock, or report how long its holder's lease has left.
-- include: waiters
-- KEYS[1] lock key (a plain string holding the owner's token, as redis-py's Lock uses)
-- KEYS[2] waiter zset of this lock; KEYS[3] signal list of this lock (same hash slot)
-- ARGV[1] token; ARGV[2] lease ttl in ms
-- ARGV[3] waiter window in ms: 0 = try once (never joins the waiters), else join on failure
-- ARGV[4] limit (unused by locks)
-- KEYS[4], ARGV[5] (fencing only) the fence counter, and how long to keep it in ms
-- returns {1, ttl ms[, fencing token]} acquired
--       | {0, ms until the holder's lease ends, or -1 if it never ends}
local window = tonumber(ARGV[3])
local mine = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
if not mine and redis.call('GET', KEYS[1]) == ARGV[1] then
  -- This very attempt already landed once: the client re-sent it after losing the reply (a
  -- retry policy does that after a timeout). Without this the caller would wait for itself.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  mine = true
end
if mine then
  if window > 0 then
    waiter_leave(KEYS[2], KEYS[3], ARGV[1])
  end
  if KEYS[4] then
    -- Strictly above every earlier token of this name: the counter, floored by the server's
    -- clock in microseconds so the sequence survives the counter key's expiry.
    local t = redis.call('TIME')
    local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
    local fence = math.max(tonumber(redis.call('GET', KEYS[4]) or '0') + 1, floor)
    redis.call('SET', KEYS[4], string.format('%d', fence), 'PX', ARGV[5])
    return {1, tonumber(ARGV[2]), fence}
  end
  return {1, tonumber(ARGV[2])}
end
if window > 0 then
  waiter_join(KEYS[2], ARGV[1], window, now_ms())
end
return {0, redis.call('PTTL', KEYS[1])}
