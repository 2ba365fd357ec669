-- expire_subscriptions: send the `expired` notice of each given subscription
-- whose time ran out while it was still waiting. A subscription that was
-- notified meanwhile is off the waiting list and gets nothing more.
-- uses: notice_lib
--
-- KEYS[1]   agents     hash    agent_id -> agent JSON
-- KEYS[2]   seq        string  project sequence
-- KEYS[3]   due        zset    delivery ids by due time (ms)
-- KEYS[4]   sub_due    zset    waiting subscription ids by expiry (ms)
-- KEYS[5]   idle_subs  hash    target agent_id -> JSON of its waiting subscriptions
-- KEYS[6]   retention  zset    stored message ids by when retention looks at them
-- KEYS[7]   held       zset    held delivery ids by admission sequence
-- KEYS[8..]  five per subscription, in the order of ARGV[5]: the
--            subscription hash, its notice's message hash, delivery hash and
--            thread zset, the subscriber's events stream
--
-- ARGV[1]  now, us (decimal string)
-- ARGV[2]  now, ms (decimal string)
-- ARGV[3]  the notices' outbox due time, ms (decimal string)
-- ARGV[4]  events stream cap (approximate MAXLEN)
-- ARGV[5]  JSON list of [subscription id, target agent id]
-- ARGV[6]  how long a subscription is kept after its notice, s
--
-- Returns a flat array: per notice sent, subscription id, delivery id, transport.

local g = {agents = KEYS[1], seq = KEYS[2], due = KEYS[3], sub_due = KEYS[4],
  retention = KEYS[6], held = KEYS[7], now_us = ARGV[1], due_ms = ARGV[3], maxlen = ARGV[4],
  keep_s = ARGV[6]}
local now_ms = tonumber(ARGV[2])
local out = {}
for i, pair in ipairs(cjson.decode(ARGV[5])) do
  local sid, target_id = pair[1], pair[2]
  local score = redis.call("ZSCORE", KEYS[4], sid)
  if score and tonumber(score) <= now_ms then
    redis.call("ZREM", KEYS[4], sid)
    if take_waiting(KEYS[5], target_id, sid) then
      for _, v in ipairs(fire_notice(notice_keys(8, i), "expired", g)) do
        table.insert(out, v)
      end
    end
  end
end
return out
