-- Waiter registry and wake-up signals, shared by the lock and semaphore scripts: the loader
-- prepends this file to every script whose header says "-- include: waiters".
--
-- A waiter that failed to acquire joins a ZSET scored by the server time (ms) until which it
-- may stay blocked on the signal list (its BLPOP slice plus slack). A release pushes one
-- signal per freed place, but only while live waiters exist and never more signals than live
-- waiters, so an uncontended release writes nothing and no key outlives the contention.
-- Joining happens in the same script as the failed attempt, so a release that lands between
-- "attempt failed" and "BLPOP started" still leaves its signal in the list: no lost wake-up.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function waiter_join(waiters, token, window_ms, now)
  redis.call('ZADD', waiters, now + window_ms, token)
  if redis.call('PTTL', waiters) < window_ms then
    redis.call('PEXPIRE', waiters, window_ms)
  end
end

local function waiter_leave(waiters, signal, token)
  redis.call('ZREM', waiters, token)
  if redis.call('EXISTS', waiters) == 0 then
    redis.call('DEL', signal)
  end
end

local function wake(waiters, signal, count)
  if redis.call('EXISTS', waiters) == 0 then
    return
  end
  local now = now_ms()
  redis.call('ZREMRANGEBYSCORE', waiters, '-inf', now)
  local live = redis.call('ZCARD', waiters)
  if live == 0 then
    redis.call('DEL', signal)
    return
  end
  for _ = 1, math.min(count, live - redis.call('LLEN', signal)) do
    redis.call('RPUSH', signal, '1')
  end
  -- The signal must stay until the last registered waiter's block has ended, no longer.
  local last = redis.call('ZRANGE', waiters, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', signal, math.max(1, tonumber(last[2]) - now))
end
