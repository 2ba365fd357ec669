-- mark_handed_off: a non-idempotent transport's request is about to leave.
-- From now on, a lease that runs out means `unknown`; before this mark, it
-- means the worker stopped before sending anything (`failed`).
--
-- KEYS[1]  dlv  hash  the delivery
--
-- ARGV[1]  fencing token of the lease
--
-- Returns 1 when marked, 0 when the token is stale (the request must not leave).

if redis.call("HGET", KEYS[1], "fence") ~= ARGV[1] then
  return 0
end
redis.call("HSET", KEYS[1], "handed_off_fence", ARGV[1])
return 1
