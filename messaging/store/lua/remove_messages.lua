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

local a = cjson.decode(ARGV[1])
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
local k = 4
for _, m in ipairs(a.messages) do
  local mid, tomb, ndlv, nev, dtombs = m[1], m[2], m[3], m[4], m[5]
  local created = tonumber(redis.call("HGET", KEYS[k], "created_us") or "0")
  local newest, final = created, true
  for j = 0, ndlv - 1 do
    local t = final_newest(KEYS[k + 2 + 2 * j])
    if t == nil then
      final = false
    elseif t > newest then
      newest = t
    end
  end
  if not final then
    table.insert(later, {mid, now_ms})
  elseif newest >= cutoff then
    table.insert(later, {mid, string.format("%d", math.floor(newest / 1000))})
  else
    table.insert(removed, {mid, tomb, k, ndlv, nev, dtombs})
  end
  k = k + 2 + 2 * ndlv + nev
end

local minid = string.format("%d", math.floor(cutoff / 1000))
local ids, trimmed = {}, {}
for _, r in ipairs(removed) do
  local mid, tomb, base, ndlv, nev, dtombs = r[1], r[2], r[3], r[4], r[5], r[6]
  redis.call("DEL", KEYS[base])
  redis.call("ZREM", KEYS[base + 1], mid)
  redis.call("ZREM", KEYS[1], mid)
  for j = 0, ndlv - 1 do
    local dlv, inbox = KEYS[base + 2 + 2 * j], KEYS[base + 3 + 2 * j]
    local did = redis.call("HGET", dlv, "id")
    if did then
      redis.call("DEL", dlv)
      redis.call("ZREM", inbox, did)
      redis.call("ZREM", KEYS[2], did)
      redis.call("HSET", KEYS[3], did, dtombs[j + 1])
    end
  end
  local events_from = base + 2 + 2 * ndlv
  for j = events_from, events_from + nev - 1 do
    -- every event older than the cutoff: this message's and any other's
    if not trimmed[KEYS[j]] then
      redis.call("XTRIM", KEYS[j], "MINID", minid)
      trimmed[KEYS[j]] = true
    end
  end
  redis.call("HSET", KEYS[3], mid, tomb)
  table.insert(ids, mid)
end
if #ids > 0 then
  redis.call("EXPIRE", KEYS[3], a.archived_ttl_s)
end
for _, l in ipairs(later) do
  redis.call("ZADD", KEYS[1], "XX", l[2], l[1])
end
return ids
