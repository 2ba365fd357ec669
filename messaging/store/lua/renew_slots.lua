-- renew_slots: a worker's requests still under way keep their slots in the
-- in-flight set (lease_lib) for another slot_ms from now, by the store's
-- clock. Only a slot still there is renewed: one whose outcome was recorded
-- (record_outcomes took it out) or that ran out is never put back, so a
-- renewal that crosses a recording changes nothing. The delivery's lease is
-- not touched: it still bounds how long the request may run.
-- uses: clock_lib
--
-- KEYS[1]  in_flight  zset  "<agent_id> <delivery_id>" of capped requests under way,
--                           by slot end (ms)
--
-- ARGV[1]   how long a slot lasts from now, ms
-- ARGV[2..] two per request: its recipient agent id, its delivery id
--
-- Returns how many slots were renewed.

local in_flight_key = KEYS[1]
local slot_ms = tonumber(ARGV[1])
local now_ms = math.floor(clock_us() / 1000)
local slot_until = time_text(now_ms + slot_ms)

local renewed = 0
for i = 2, #ARGV - 1, 2 do
  local member = ARGV[i] .. " " .. ARGV[i + 1]
  local score = redis.call("ZSCORE", in_flight_key, member)
  if score and tonumber(score) >= now_ms then
    redis.call("ZADD", in_flight_key, "XX", slot_until, member)
    renewed = renewed + 1
  end
end
return renewed
