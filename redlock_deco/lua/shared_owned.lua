-- Does the caller still hold a live share of this token lock? Read-only.
-- include: waiters
-- KEYS[1] lock key; KEYS[2] readers
-- ARGV[1] token
-- returns 1 reader | 0 not a reader
if redis.call('GET', KEYS[1]) ~= SHARED then
  return 0
end
local ends = redis.call('ZSCORE', KEYS[2], ARGV[1])
if ends and tonumber(ends) > now_ms() then
  return 1
end
return 0
