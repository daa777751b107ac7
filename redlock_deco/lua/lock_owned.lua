-- Does the caller still own this token lock? Read-only.
-- KEYS[1] lock key
-- ARGV[1] token
-- returns 1 owner | 0 not the owner
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return 1
end
return 0
