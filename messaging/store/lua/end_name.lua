-- end_name: an authorized name ran out (the sweeper) or was deleted (the
-- project) before any agent registered it: end every delivery waiting for
-- it `failed`, never dispatched, and tell each sender.
-- uses: names_lib
--
-- KEYS[1]  names        hash  name -> JSON list of agent ids
-- KEYS[2..5]  the name's keys, named n.<name> by name_keys (names_lib):
--   KEYS[2]  allowed      hash  authorized name -> JSON {name, expires_ms, set_us}
--   KEYS[3]  allowed_due  zset  authorized names by expiry (ms)
--   KEYS[4]  waiting      zset  the name's waiting delivery ids by admission sequence
--   KEYS[5]  stats        hash  delivery counters
-- KEYS[6..] two per waiting delivery, in the order of ARGV ids: its dlv hash,
--           its sender's events stream
--
-- ARGV[1]  JSON {name, now_us, now_ms, mode ("expired"|"deleted"), error,
--          maxlen, ids: the waiting delivery ids the caller read}
--
-- Records: messaging/store/schema.py.
-- Returns {"missing"} (no such authorization, nothing waiting), {"extended"}
-- (an expiry whose authorization was renewed), {"registered"} (an agent has
-- the name: bind instead), {"retry"} (a delivery the caller did not read is
-- waiting), all writing nothing; else {"ok", number of deliveries ended}.

local names_key = KEYS[1]
local n = name_keys(KEYS, 2)
local args_json = ARGV[1]

local a = cjson.decode(args_json)
local waiting_keys = key_groups(KEYS, 6, #a.ids, {"dlv", "events"})
local auth = redis.call("HGET", n.allowed, a.name)
if redis.call("HEXISTS", names_key, a.name) == 1 then return {"registered"} end
if a.mode == "expired" and auth
    and tonumber(cjson.decode(auth).expires_ms) > tonumber(a.now_ms) then
  return {"extended"}
end
local waiting = waiting_as_read(n, a.ids)
if not waiting then return {"retry"} end
if not auth and #waiting == 0 then
  redis.call("ZREM", n.allowed_due, a.name)
  return {"missing"}
end
end_authorization(n, a.name)
local ended = 0
for i, did in ipairs(a.ids) do
  local dlv, events = waiting_keys[i].dlv, waiting_keys[i].events
  redis.call("ZREM", n.waiting, did)
  local d = redis.call("HMGET", dlv, "target", "outcome", "message_id")
  if d[1] == "pending" and not d[2] then
    redis.call("HSET", dlv, "stage", "provider_result_recorded", "outcome", "failed",
      "error", a.error, "provider_result_recorded_us", a.now_us)
    redis.call("XADD", events, "MAXLEN", "~", a.maxlen, "*", "type", "delivery",
      "data", cjson.encode({delivery_id = did, message_id = d[3], recipient = a.name,
        stage = "provider_result_recorded", outcome = "failed", error = a.error,
        target = "pending"}))
    ended = ended + 1
  end
end
if ended > 0 then redis.call("HINCRBY", n.stats, "outcome:failed", ended) end
return {"ok", ended}
