-- expire_subscriptions: send the `expired` notice of each given subscription
-- whose time ran out while it was still waiting. A subscription that was
-- notified meanwhile is off the waiting list and gets nothing more.
-- uses: notice_lib
--
-- KEYS[1..7] and ARGV[1..4]: the project's notice keys and the notices'
--            times and caps, named g.<name> by notice_context (notice_lib)
-- KEYS[8..]  five per subscription, in the order of ARGV[6]: the
--            subscription hash, its notice's message hash, delivery hash and
--            thread zset, the subscriber's events stream
--
-- ARGV[5]  now, ms (decimal string)
-- ARGV[6]  JSON list of [subscription id, target agent id]
--
-- Returns a flat array: per notice sent, subscription id, delivery id, transport.

local g = notice_context(KEYS, ARGV)
local now_ms_text = ARGV[5]
local pairs_json = ARGV[6]
local subscriptions = notice_keys(KEYS, 8)

local now_ms = tonumber(now_ms_text)
local out = {}
for i, pair in ipairs(cjson.decode(pairs_json)) do
  local sid, target_id = pair[1], pair[2]
  local score = redis.call("ZSCORE", g.sub_due, sid)
  if score and tonumber(score) <= now_ms then
    redis.call("ZREM", g.sub_due, sid)
    notice_if_waiting(subscriptions[i], target_id, sid, "expired", g, out)
  end
end
return out
