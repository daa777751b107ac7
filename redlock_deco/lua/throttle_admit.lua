-- Admit one call (of a cost) to a throttle by GCRA, the generic cell rate algorithm, on the
-- server's clock; a call that may wait reserves its slot here and sleeps until it comes.
-- The key is a hash: tat, the theoretical arrival time, where the next call would be due if
-- every call came exactly on time, in microseconds after base, the server's time when the key
-- was made (an offset stays small, so the sums below keep a fraction of a microsecond: in
-- absolute microseconds, ~1.7e15, a double's step is 0.25 us and an interval of 33333.3 us
-- lost 0.08 us at every addition, a rate creeping up without bound); tok, the token of the last reservation (a retried command
-- finds its own token and answers again instead of counting twice); iv and b, the last
-- caller's interval and burst (read by inspect only). No key is a full bucket: the key
-- expires as its tat passes, so an idle name costs no memory.
-- A call of cost c conforms at time t when max(tat, t) + c*iv - t <= burst*iv, so in any T
-- microseconds at most burst + T/iv units start. One that does not conform now conforms at
-- max(tat, now) + c*iv - burst*iv: if that is within the caller's wait, the slot is its own
-- (tat moves past it, so the next caller queues behind), else nothing changes.
-- KEYS[1] throttle key
-- ARGV[1] the call's token; ARGV[2] its increment, c*iv (us); ARGV[3] the capacity,
-- burst*iv (us); ARGV[4] the longest delay the caller accepts, in us (-1: any);
-- ARGV[5] iv (us); ARGV[6] burst (both kept for inspect)
-- returns {1, delay} admitted: its slot is delay us from now (0: at once)
--       | {0, delay} refused, nothing taken: the earliest slot is delay us from now
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local capacity = tonumber(ARGV[3])
local state = redis.call('HMGET', KEYS[1], 'tat', 'tok', 'base')
local base = tonumber(state[3]) or now
now = now - base -- exact: both are whole microseconds, far below 2^53
local tat = tonumber(state[1]) or now
if state[2] == ARGV[1] then
  -- This call's own reservation, its reply lost and the command re-sent: the same answer.
  return {1, math.max(0, math.ceil(tat - capacity - now))}
end
if tat < now then
  tat = now
end
local due = tat + tonumber(ARGV[2])
local delay = math.max(0, math.ceil(due - capacity - now))
local wait = tonumber(ARGV[4])
if wait >= 0 and delay > wait then
  return {0, delay}
end
redis.call('HSET', KEYS[1], 'tat', string.format('%.17g', due), 'tok', ARGV[1], 'base',
  string.format('%.17g', base), 'iv', ARGV[5], 'b', ARGV[6])
redis.call('PEXPIRE', KEYS[1], math.ceil((due - now) / 1000) + 1)
return {1, delay}
