-- On a Redis Cluster only: the loader puts this before the scripts that include waiters.lua
-- when they run on a cluster (scripts.Script.on_cluster), where a slot can be moved.
--
-- A slot being moved (review 35, 06): its old node runs a script only if every key the
-- script names is there; but once the script itself deletes one of them (DEL, or by emptying
-- a sorted set), Redis refuses the script's next command on that key ("non local key": it
-- might be on the new node), and the script stops there, its earlier writes kept. A release
-- so stopped raised after giving the lease back, before serving the queue; one stopped
-- between a grant's PUBLISH and its write would have left the grantee holding what the key
-- does not say. So every command of these scripts goes through this `redis`: a key the script
-- emptied reads as the missing key it is (`gone`); a write that would make it again is
-- refused, and the hand-off asks `written` (waiters.lua) before it tells a grantee anything.
-- Any other error is raised as redis.call raises it. (Not on a single server, which never
-- refuses so: this costs a script 2-4 us of the server's time, measured.)
local server = redis

-- A read's reply on a missing key (and a write's that changes nothing there); nil for a
-- write that would make the key.
local function gone(command)
  command = string.upper(command)
  if command == 'GET' or command == 'ZSCORE' then
    return false
  elseif command == 'ZRANGE' or command == 'ZPOPMIN' then
    return {}
  elseif command == 'PTTL' then
    return -2
  elseif command == 'ZCARD' or command == 'EXISTS' or command == 'DEL' or command == 'ZREM'
      or command == 'ZREMRANGEBYSCORE' or command == 'PEXPIRE' then
    return 0
  end
  return nil
end

local redis = {
  pcall = server.pcall, sha1hex = server.sha1hex, REDIS_VERSION_NUM = server.REDIS_VERSION_NUM,
  call = function(command, ...)
    local reply = server.pcall(command, ...)
    if type(reply) == 'table' and reply.err then
      if string.find(reply.err, 'non local key', 1, true) then
        local empty = gone(command)
        if empty ~= nil then
          return empty
        end
      end
      return server.call(command, ...)  -- raised as redis.call raises it (nothing ran)
    end
    return reply
  end,
}
