-- mark_handed_off: a non-idempotent transport's request is about to leave.
-- From now on, a lease that runs out means `unknown`; before this mark, it
-- means the worker stopped before sending anything (`failed`).
--
-- KEYS[1]  dlv  hash  the delivery
--
-- ARGV[1]  fencing token of the lease
--
-- Returns 1 when marked, 0 when the token is stale (the request must not leave).

local dlv = KEYS[1]
local fence = ARGV[1]

if redis.call("HGET", dlv, "fence") ~= fence then
  return 0
end
redis.call("HSET", dlv, "handed_off_fence", fence)
return 1
