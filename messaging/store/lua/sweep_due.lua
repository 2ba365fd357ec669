-- sweep_due: decide, for deliveries whose due time has passed, what the
-- sweeper does, and push their due time forward so one sweep owns each.
-- A delivery published again and still not leased (waiting its turn behind a
-- backlog, or its ticket lost) is looked at again after a grace that doubles
-- each time, up to MAX_BACKOFF graces (its `sweeps` count; a lease clears it):
-- a long backlog is not published over and over. Whether a due time has passed
-- is the store's clock's to say (clock_lib), whoever runs the sweep.
-- uses: clock_lib
--
-- KEYS[1]     due   zset  delivery ids by due time (ms)
-- KEYS[2..]   dlv   hash  one delivery each
--
-- ARGV[1]  grace before the same delivery is looked at again, ms
-- ARGV[2]  space-separated transports that are idempotent by delivery id
--
-- The caller picks the KEYS from the due set by a reading of read_clock; a
-- delivery whose due time has not passed by this script's own reading is
-- left as it is.
--
-- Returns a flat array of (delivery id, transport, action), action one of
--   "publish"  never dispatched, a retry or redrive whose time has come, or an
--              idempotent transport whose worker died: publish a task again
--   "expired"  a non-idempotent transport's lease ran out: outcome unknown
-- Deliveries with nothing left to do leave the set, and so do held ones and
-- pending ones (never published before release or binding).

local MAX_BACKOFF = 32
local due_key = KEYS[1]
local dlv_keys = {}
for i = 2, #KEYS do dlv_keys[i - 1] = KEYS[i] end
local grace_ms = tonumber(ARGV[1])
local idempotent_transports = ARGV[2]
local now_ms = math.floor(clock_us() / 1000)

local idempotent = {}
for t in string.gmatch(idempotent_transports, "%S+") do idempotent[t] = true end
local out = {}
for _, dlv in ipairs(dlv_keys) do
  local d = redis.call("HMGET", dlv, "id", "stage", "lease_until_ms", "transport", "outcome",
    "redrive", "held", "target")
  local id = d[1]
  if id then
    local score = redis.call("ZSCORE", due_key, id)
    if score and tonumber(score) <= now_ms then
      local lease = tonumber(d[3] or "0")
      local action = nil
      if d[7] == "1" or d[8] == "pending" then
        action = nil -- held or pending: release or binding puts it back
      elseif lease ~= 0 then
        if idempotent[d[4]] and not d[5] then action = "publish" else action = "expired" end
      elseif d[6] == "1" or (not d[5] and d[2] ~= "provider_result_recorded"
          and d[2] ~= "delivery_observed") then
        action = "publish"
      end
      if action then
        local wait = grace_ms
        if action == "publish" then
          local sweeps = redis.call("HINCRBY", dlv, "sweeps", 1)
          wait = grace_ms * math.min(2 ^ (sweeps - 1), MAX_BACKOFF)
        end
        redis.call("ZADD", due_key, string.format("%d", now_ms + wait), id)
        table.insert(out, id)
        table.insert(out, d[4])
        table.insert(out, action)
      else
        redis.call("ZREM", due_key, id)
      end
    end
  end
end
return out
