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

local agents_key = KEYS[1]
local seq_key = KEYS[2]
local due_key = KEYS[3]
local sub_due_key = KEYS[4]
local idle_subs_key = KEYS[5]
local retention_key = KEYS[6]
local held_key = KEYS[7]
local now_us = ARGV[1]
local now_ms_text = ARGV[2]
local notice_due_ms = ARGV[3]
local events_cap = ARGV[4]
local pairs_json = ARGV[5]
local keep_s = ARGV[6]
local subscriptions = notice_keys(KEYS, 8)

local g = {agents = agents_key, seq = seq_key, due = due_key, sub_due = sub_due_key,
  retention = retention_key, held = held_key, now_us = now_us, due_ms = notice_due_ms,
  maxlen = events_cap, keep_s = keep_s}
local now_ms = tonumber(now_ms_text)
local out = {}
for i, pair in ipairs(cjson.decode(pairs_json)) do
  local sid, target_id = pair[1], pair[2]
  local score = redis.call("ZSCORE", sub_due_key, sid)
  if score and tonumber(score) <= now_ms then
    redis.call("ZREM", sub_due_key, sid)
    if take_waiting(idle_subs_key, target_id, sid) then
      for _, v in ipairs(fire_notice(subscriptions[i], "expired", g)) do
        table.insert(out, v)
      end
    end
  end
end
return out
