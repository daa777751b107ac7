-- How many hold this token lock: 1 (a writer, or a value not ours), the number of live
-- readers, or 0. Read-only.
-- include: waiters
-- KEYS[1] lock key; KEYS[2] its readers
-- ARGV[1] unused (scripts take a token first; pass "")
-- returns number of holders
local holder = redis.pcall('GET', KEYS[1])
if holder == SHARED then
  return redis.call('ZCOUNT', KEYS[2], '(' .. now_ms(), '+inf')
end
if holder then
  return 1  -- a token, or a key of another type (as EXISTS would say)
end
return 0
