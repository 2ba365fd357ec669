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

local a = cjson.decode(ARGV[1])
local raw = redis.call("HGET", KEYS[1], a.target_id)
if not raw then return cjson.encode({status = "refused", reason = "not_found"}) end
local target = cjson.decode(raw)
if target.status ~= "active" then
  return cjson.encode({status = "refused", reason = target.status})
end
if target.presence == "source_lost" then
  return cjson.encode({status = "refused", reason = "bound_source_lost"})
end
if redis.call("EXISTS", KEYS[8]) == 1 then
  return cjson.encode({status = "exists"})
end
redis.call("HSET", KEYS[8], "state", "waiting", unpack(ARGV, 2))

local presence = target.presence
if not a.after_message and (presence == "idle" or presence == "exited") then
  local g = {agents = KEYS[1], seq = KEYS[2], due = KEYS[3], sub_due = KEYS[4],
    retention = KEYS[6], held = KEYS[7], now_us = a.now_us, due_ms = a.due_ms,
    maxlen = a.maxlen, keep_s = a.keep_s}
  local r = fire_notice(notice_keys(8, 1), presence, g)
  return cjson.encode({status = "notified", state = presence, delivery_id = r[2],
    transport = r[3]})
end

local waiting = {}
local w = redis.call("HGET", KEYS[5], a.target_id)
if w then waiting = cjson.decode(w) end
waiting[a.id] = a.entry
redis.call("HSET", KEYS[5], a.target_id, cjson.encode(waiting))
redis.call("ZADD", KEYS[4], a.expires_ms, a.id)
return cjson.encode({status = "waiting"})
