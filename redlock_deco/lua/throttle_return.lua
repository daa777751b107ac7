-- Give a throttle back the slot a call reserved and will not use (cancelled or interrupted
-- while it waited for it) -- only if no later call has reserved since: undoing an earlier
-- reservation would bring the next slot before slots already promised to later callers.
-- Once given back the token is gone, so a re-sent command gives nothing back twice.
-- KEYS[1] throttle key
-- (tat is in microseconds after base: see throttle_admit.lua)
-- ARGV[1] the call's token; ARGV[2] its increment (c*iv, us, as it reserved)
-- returns 1 given back | 0 kept: a later call reserved after it, or the key has gone
local state = redis.call('HMGET', KEYS[1], 'tat', 'tok', 'base')
if state[2] ~= ARGV[1] then
  return 0
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2]) - tonumber(state[3])
local tat = tonumber(state[1]) - tonumber(ARGV[2])
if tat <= now then
  redis.call('DEL', KEYS[1])
  return 1
end
redis.call('HSET', KEYS[1], 'tat', string.format('%.17g', tat))
redis.call('HDEL', KEYS[1], 'tok')
redis.call('PEXPIRE', KEYS[1], math.ceil((tat - now) / 1000) + 1)
return 1
