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

local out = {}
for p = 0, (#KEYS - 1) / 3 - 1 do
  local dlv, inbox, events = KEYS[2 + 3 * p], KEYS[3 + 3 * p], KEYS[4 + 3 * p]
  local d = redis.call("HMGET", dlv, "fence", "outcome", "id", "message_id", "policy")
  if d[1] == ARGV[2 + p] and not d[2] then
    if not redis.call("ZSCORE", inbox, d[3]) then
      redis.call("ZADD", inbox, redis.call("INCR", KEYS[1]), d[3])
      redis.call("XADD", events, "MAXLEN", "~", ARGV[1], "*", "type", "message",
        "data", cjson.encode({message_id = d[4], delivery_id = d[3], notification_policy = d[5]}))
    end
    out[p + 1] = 1
  else
    out[p + 1] = 0
  end
end
return out
