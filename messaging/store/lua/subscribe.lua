-- subscribe: register one idle subscription on an exact target agent, or
-- send its notice at once when the target is already idle (or exited) and
-- the subscription carries no message.
-- uses: notice_lib
--
-- KEYS[1]   agents     hash    agent_id -> agent JSON
-- KEYS[2]   seq        string  project sequence
-- KEYS[3]   due        zset    delivery ids by due time (ms)
-- KEYS[4]   sub_due    zset    waiting subscription ids by expiry (ms)
-- KEYS[5]   idle_subs  hash    target agent_id -> JSON of its waiting subscriptions
-- KEYS[6]   retention  zset    stored message ids by when retention looks at them
-- KEYS[7]   held       zset    held delivery ids by admission sequence
-- KEYS[8..12]  the new subscription hash, its notice's message hash, delivery
--              hash and thread zset, the subscriber's events stream
--
-- ARGV[1]  JSON {id, target_id, now_us, due_ms, expires_ms, maxlen, keep_s,
--          after_message (bool: a message was just sent, so wait for the
--          next idle or exit), entry ({s, m, d, t}: the waiting-list entry)}
-- ARGV[2..]  field, value pairs of the subscription hash
--
-- Returns a JSON string, one of:
--   {"status":"refused","reason":"not_found"|"retired"|"closed"|"bound_source_lost"}
--   {"status":"exists"}      the subscription id is taken (a retried request)
--   {"status":"waiting"}
--   {"status":"notified","state":..,"delivery_id":..,"transport":..}

local agents_key = KEYS[1]
local seq_key = KEYS[2]
local due_key = KEYS[3]
local sub_due_key = KEYS[4]
local idle_subs_key = KEYS[5]
local retention_key = KEYS[6]
local held_key = KEYS[7]
local args_json = ARGV[1]
local sub_fields = {unpack(ARGV, 2)}
local subscription = notice_keys(KEYS, 8)[1]

local a = cjson.decode(args_json)
local raw = redis.call("HGET", agents_key, a.target_id)
if not raw then return cjson.encode({status = "refused", reason = "not_found"}) end
local target = cjson.decode(raw)
if target.status ~= "active" then
  return cjson.encode({status = "refused", reason = target.status})
end
if target.presence == "source_lost" then
  return cjson.encode({status = "refused", reason = "bound_source_lost"})
end
if redis.call("EXISTS", subscription.sub) == 1 then
  return cjson.encode({status = "exists"})
end
redis.call("HSET", subscription.sub, "state", "waiting", unpack(sub_fields))

local presence = target.presence
if not a.after_message and (presence == "idle" or presence == "exited") then
  local g = {agents = agents_key, seq = seq_key, due = due_key, sub_due = sub_due_key,
    retention = retention_key, held = held_key, now_us = a.now_us, due_ms = a.due_ms,
    maxlen = a.maxlen, keep_s = a.keep_s}
  local r = fire_notice(subscription, presence, g)
  return cjson.encode({status = "notified", state = presence, delivery_id = r[2],
    transport = r[3]})
end

local waiting = {}
local w = redis.call("HGET", idle_subs_key, a.target_id)
if w then waiting = cjson.decode(w) end
waiting[a.id] = a.entry
redis.call("HSET", idle_subs_key, a.target_id, cjson.encode(waiting))
redis.call("ZADD", sub_due_key, a.expires_ms, a.id)
return cjson.encode({status = "waiting"})
