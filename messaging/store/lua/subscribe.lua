-- subscribe: register one idle subscription on an exact target agent, or
-- send its notice at once when the target is already idle (or exited) and
-- the subscription carries no message.
-- uses: notice_lib
--
-- KEYS[1..7] and ARGV[1..4]: the project's notice keys and the notices'
--            times and caps, named g.<name> by notice_context (notice_lib)
-- KEYS[8..12]  the new subscription hash, its notice's message hash, delivery
--              hash and thread zset, the subscriber's events stream
--
-- ARGV[5]  JSON {id, target_id, expires_ms, after_message (bool: a message
--          was just sent, so wait for the next idle or exit), entry ({s, m,
--          d, t}: the waiting-list entry)}
-- ARGV[6..]  field, value pairs of the subscription hash
--
-- Returns a JSON string, one of:
--   {"status":"refused","reason":"not_found"|"retired"|"closed"|"bound_source_lost"}
--   {"status":"exists"}      the subscription id is taken (a retried request)
--   {"status":"waiting"}
--   {"status":"notified","state":..,"delivery_id":..,"transport":..}

local g = notice_context(KEYS, ARGV)
local args_json = ARGV[5]
local sub_fields = {unpack(ARGV, 6)}
local subscription = notice_keys(KEYS, 8)[1]

local a = cjson.decode(args_json)
local raw = redis.call("HGET", g.agents, a.target_id)
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

local presence = presence_of(target, g.now_us)
if not a.after_message and (presence == "idle" or presence == "exited") then
  local r = fire_notice(subscription, presence, g)
  return cjson.encode({status = "notified", state = presence, delivery_id = r[2],
    transport = r[3]})
end

local waiting = {}
local w = redis.call("HGET", g.idle_subs, a.target_id)
if w then waiting = cjson.decode(w) end
waiting[a.id] = a.entry
redis.call("HSET", g.idle_subs, a.target_id, cjson.encode(waiting))
redis.call("ZADD", g.sub_due, a.expires_ms, a.id)
return cjson.encode({status = "waiting"})
