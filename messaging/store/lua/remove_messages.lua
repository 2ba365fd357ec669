-- remove_messages: remove archived messages from the store, with their
-- deliveries, inbox and thread entries, and their events. Each message is
-- checked again here: it goes only if every delivery is still final and
-- nothing happened to it since the cutoff; otherwise it stays and the
-- retention index looks at it again later.
--
-- KEYS[1]  retention  zset    stored message ids by when retention looks at them
-- KEYS[2]  due        zset    delivery ids by due time (ms)
-- KEYS[3]  archived   hash    removed ids -> their tombstone: the archive day, then
--                               the agents that could see it (410 ARCHIVED to
--                               them), the hash of this stretch of time
-- KEYS[4..]  per message, in the order of ARGV[1].messages: its message hash,
--            its thread zset, then for each delivery its dlv hash and its
--            recipient's inbox zset, then the event streams of its sender and
--            recipients
--
-- ARGV[1]  JSON {cutoff_us: removable when the newest activity is older,
--          now_ms, archived_ttl_s: how long the archived hash answers,
--          messages: [[message id, its tombstone, deliveries, event streams
--          (counts of keys), [each delivery's tombstone]]]}
--
-- Final: an outcome recorded and no redrive or lease under way, or declined.
-- Newest activity: the message's admission and every `*_us` time of its
-- deliveries (stages, read, ack, decline).
--
-- Returns the ids of the messages removed.

local retention_key = KEYS[1]
local due_key = KEYS[2]
local archived_key = KEYS[3]
local a = cjson.decode(ARGV[1])
-- Each message's id, tombstones and keys, by name, from KEYS[4] on.
local messages = {}
local k = 4
for i, m in ipairs(a.messages) do
  local ndlv, nev = m[3], m[4]
  local r = {mid = m[1], tomb = m[2], dtombs = m[5], msg = KEYS[k], thread = KEYS[k + 1],
    deliveries = {}, events = {}}
  for j = 0, ndlv - 1 do
    r.deliveries[j + 1] = {dlv = KEYS[k + 2 + 2 * j], inbox = KEYS[k + 3 + 2 * j]}
  end
  for j = 0, nev - 1 do
    r.events[j + 1] = KEYS[k + 2 + 2 * ndlv + j]
  end
  messages[i] = r
  k = k + 2 + 2 * ndlv + nev
end
local cutoff = tonumber(a.cutoff_us)
local now_ms = string.format("%d", a.now_ms)

-- The newest `*_us` time of a delivery, or nil when it is not final.
local function final_newest(dlv)
  local flat = redis.call("HGETALL", dlv)
  if #flat == 0 then return 0 end -- gone already: nothing of it to keep
  local h, newest = {}, 0
  for i = 1, #flat, 2 do
    h[flat[i]] = flat[i + 1]
    if string.sub(flat[i], -3) == "_us" then
      local t = tonumber(flat[i + 1])
      if t and t > newest then newest = t end
    end
  end
  local leased = h.lease_until_ms and h.lease_until_ms ~= "0"
  local outcome = h.outcome and h.outcome ~= ""
  if h.declined_us or (outcome and h.redrive ~= "1" and not leased) then
    return newest
  end
  return nil
end

-- Decide first, write after: under a full store a removal's first write is a
-- DEL, which the store allows, and the tombstones and index updates follow
-- (a script that has begun writing is never stopped halfway).
local removed, later = {}, {}
for _, r in ipairs(messages) do
  local msg = r.msg
  local created = tonumber(redis.call("HGET", msg, "created_us") or "0")
  local newest, final = created, true
  for _, d in ipairs(r.deliveries) do
    local t = final_newest(d.dlv)
    if t == nil then
      final = false
    elseif t > newest then
      newest = t
    end
  end
  if not final then
    table.insert(later, {r.mid, now_ms})
  elseif newest >= cutoff then
    table.insert(later, {r.mid, string.format("%d", math.floor(newest / 1000))})
  else
    table.insert(removed, r)
  end
end

local minid = string.format("%d", math.floor(cutoff / 1000))
local ids, trimmed = {}, {}
for _, r in ipairs(removed) do
  local mid = r.mid
  redis.call("DEL", r.msg)
  redis.call("ZREM", r.thread, mid)
  redis.call("ZREM", retention_key, mid)
  for j, d in ipairs(r.deliveries) do
    local dlv, inbox = d.dlv, d.inbox
    local did = redis.call("HGET", dlv, "id")
    if did then
      redis.call("DEL", dlv)
      redis.call("ZREM", inbox, did)
      redis.call("ZREM", due_key, did)
      redis.call("HSET", archived_key, did, r.dtombs[j])
    end
  end
  for _, events in ipairs(r.events) do
    -- every event older than the cutoff: this message's and any other's
    if not trimmed[events] then
      redis.call("XTRIM", events, "MINID", minid)
      trimmed[events] = true
    end
  end
  redis.call("HSET", archived_key, mid, r.tomb)
  table.insert(ids, mid)
end
if #ids > 0 then
  redis.call("EXPIRE", archived_key, a.archived_ttl_s)
end
for _, l in ipairs(later) do
  redis.call("ZADD", retention_key, "XX", l[2], l[1])
end
return ids
