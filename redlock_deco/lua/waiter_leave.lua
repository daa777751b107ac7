-- A waiter gives up: leave the waiter zset, and drop a signal nobody is left to take.
-- include: waiters
-- KEYS[1] waiter zset; KEYS[2] signal list
-- ARGV[1] token
-- returns 1 done
waiter_leave(KEYS[1], KEYS[2], ARGV[1])
return 1
