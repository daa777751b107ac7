-- Count the live holders of a semaphore (leases not yet ended by the server's clock).
-- include: waiters
-- KEYS[1] holders zset
-- ARGV[1] unused (scripts take a token first; pass "")
-- returns number of live holders
return redis.call('ZCOUNT', KEYS[1], '(' .. now_ms(), '+inf')
