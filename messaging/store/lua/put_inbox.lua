-- put_inbox: the inbox transport's hand-off. Put each leased delivery in its
-- recipient's inbox, once (the delivery id is the member), only under the
-- holder's fencing token, and tell the recipient (a `message` event). The
-- outcome is recorded afterwards by record_outcomes, like any transport's.
--
-- KEYS[1]     seq    string  project sequence (inbox scores)
-- KEYS[2..]   three per delivery: its dlv hash, the recipient's inbox zset,
--             the recipient's events stream
--
-- ARGV[1]     events stream cap (approximate MAXLEN)
-- ARGV[2..]   one per delivery, in order: its fencing token
--
-- Returns one flag per delivery: 1 in the inbox (now or already), 0 when the
-- token is stale or an outcome is recorded (nothing written).

local seq_key = KEYS[1]
local events_cap = ARGV[1]
-- Each delivery's keys and fencing token, by name.
local deliveries = {}
for p = 0, (#KEYS - 1) / 3 - 1 do
  deliveries[p + 1] = {dlv = KEYS[2 + 3 * p], inbox = KEYS[3 + 3 * p],
    events = KEYS[4 + 3 * p], fence = ARGV[2 + p]}
end

local out = {}
for p, r in ipairs(deliveries) do
  local dlv, inbox, events = r.dlv, r.inbox, r.events
  local d = redis.call("HMGET", dlv, "fence", "outcome", "id", "message_id", "policy")
  if d[1] == r.fence and not d[2] then
    if redis.call("ZADD", inbox, "NX", redis.call("INCR", seq_key), d[3]) == 1 then
      redis.call("XADD", events, "MAXLEN", "~", events_cap, "*", "type", "message",
        "data", cjson.encode({message_id = d[4], delivery_id = d[3], notification_policy = d[5]}))
    end
    out[p] = 1
  else
    out[p] = 0
  end
end
return out
