-- sweep_due: decide, for deliveries whose due time has passed, what the
-- sweeper does, and push their due time forward so one sweep owns each.
--
-- KEYS[1]     due   zset  delivery ids by due time (ms)
-- KEYS[2..]   dlv   hash  one delivery each
--
-- ARGV[1]  now, ms (decimal string)
-- ARGV[2]  grace before the same delivery is looked at again, ms
--
-- Returns a flat array of (delivery id, transport, action), action one of
--   "publish"  never dispatched, or a retry whose time has come, or an
--              idempotent transport whose worker died: publish a task again
--   "expired"  a non-idempotent transport's lease ran out after hand-off
-- Deliveries with a recorded outcome leave the set.

local now_ms = tonumber(ARGV[1])
local next_ms = string.format("%d", now_ms + tonumber(ARGV[2]))
local out = {}
for i = 2, #KEYS do
  local d = redis.call("HMGET", KEYS[i], "id", "stage", "lease_until_ms", "transport", "outcome")
  local id = d[1]
  if id then
    local score = redis.call("ZSCORE", KEYS[1], id)
    if score and tonumber(score) <= now_ms then
      local action = nil
      if d[5] then
        redis.call("ZREM", KEYS[1], id)
      elseif d[2] == "admitted" or d[2] == "target_selected" then
        action = "publish"
      elseif d[2] == "dispatch_started" then
        if tonumber(d[3]) == 0 or d[4] == "inbox" then
          action = "publish"
        else
          action = "expired"
        end
      end
      if action then
        redis.call("ZADD", KEYS[1], next_ms, id)
        table.insert(out, id)
        table.insert(out, d[4])
        table.insert(out, action)
      end
    end
  end
end
return out
