-- Give a throttle back the slot a call reserved and will not use (cancelled or interrupted
-- while it waited for it) -- only if no later call has reserved since: undoing an earlier
-- reservation would bring the next slot before slots already promised to later callers.
-- Once given back the token is gone ("-"), so a re-sent command gives nothing back twice.
-- (The key's layout and tat's unit: see throttle_admit.lua.)
-- KEYS[1] throttle key
-- ARGV[1] the call's token; ARGV[2] its increment (c*iv, us, as it reserved)
-- returns 1 given back | 0 kept: a later call reserved after it, or the key has gone
local state = redis.call('GET', KEYS[1])
if not state then
  return 0
end
local tat, base, token, rest = string.match(state, '^gcra (%S+) (%S+) (%S+) (.*)$')
if token ~= ARGV[1] then
  return 0
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2]) - tonumber(base)
tat = tonumber(tat) - tonumber(ARGV[2])
if tat <= now then
  redis.call('DEL', KEYS[1])
  return 1
end
redis.call('SET', KEYS[1], string.format('gcra %.17g %s - %s', tat, base, rest), 'PX',
  math.ceil((tat - now) / 1000) + 1)
return 1
