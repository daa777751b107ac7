-- How many hold this token lock: 1 or 0. Read-only.
-- KEYS[1] lock key
-- ARGV[1] unused (scripts take a token first; pass "")
-- returns 1 held | 0 free
return redis.call('EXISTS', KEYS[1])
