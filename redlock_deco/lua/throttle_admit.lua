-- Admit one call (of a cost) to a throttle by GCRA, the generic cell rate algorithm, on the
-- server's clock; a call that may wait reserves its slot here and sleeps until it comes.
-- The key is one string, "gcra <tat> <base> <tok> <iv> <b>" (one GET and one SET PX a call:
-- a hash took HMGET, HSET and PEXPIRE, and more memory):
--   tat, the theoretical arrival time, where the next call would be due if every call came
--   exactly on time, in microseconds after base, the server's time when the key was made (an
--   offset stays small, so the sums below keep a fraction of a microsecond: in absolute
--   microseconds, ~1.7e15, a double's step is 0.25 us and an interval of 33333.3 us lost
--   0.08 us at every addition, a rate creeping up without bound);
--   tok, the token of the last reservation ("-" for none): a retried command finds its own
--   token and answers again instead of counting twice;
--   iv and b, the last caller's interval and burst (read by inspect only).
-- No key is a full bucket: the key expires as its tat passes, so an idle name costs nothing.
-- A call of cost c conforms at time t when max(tat, t) + c*iv - t <= burst*iv, so in any T
-- microseconds at most burst + T/iv units start. One that does not conform now conforms at
-- max(tat, now) + c*iv - burst*iv: if that is within the caller's wait, the slot is its own
-- (tat moves past it, so the next caller queues behind), else nothing changes.
-- KEYS[1] throttle key
-- ARGV[1] the call's token; ARGV[2] its increment, c*iv (us); ARGV[3] the capacity,
-- burst*iv (us); ARGV[4] the longest delay the caller accepts, in us;
-- ARGV[5] iv (us); ARGV[6] burst (both kept for inspect)
-- returns {1, delay} admitted: its slot is delay us from now (0: at once)
--       | {0, delay} refused, nothing taken: the earliest slot is delay us from now
--       | {2, 0} the key holds another string (a lock's token, the application's data):
--         nothing touched (review 8, t07: overwritten, a lock's key let a second holder in)
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local capacity = tonumber(ARGV[3])
local tat, base, token
local state = redis.call('GET', KEYS[1])
if state then
  tat, base, token = string.match(state, '^gcra (%S+) (%S+) (%S+)')
  if not token then
    return {2, 0}
  end
  tat, base = tonumber(tat), tonumber(base)
end
base = base or now
now = now - base -- exact: both are whole microseconds, far below 2^53
tat = tat or now
if token == ARGV[1] then
  -- This call's own reservation, its reply lost and the command re-sent: the same answer.
  return {1, math.max(0, math.ceil(tat - capacity - now))}
end
if tat < now then
  tat = now
end
local due = tat + tonumber(ARGV[2])
local delay = math.max(0, math.ceil(due - capacity - now))
if delay > tonumber(ARGV[4]) then
  return {0, delay}
end
redis.call('SET', KEYS[1], string.format('gcra %.17g %.17g %s %s %s', due, base, ARGV[1],
  ARGV[5], ARGV[6]), 'PX', math.ceil((due - now) / 1000) + 1)
return {1, delay}
