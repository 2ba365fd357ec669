-- index_message: add messages to the project's search postings and to the sets
-- of the agents that see them (idempotent: a message is the same member with
-- the same score every time). One call carries a few messages (a worker's
-- step), each posting key once with all of its messages, so the store is never
-- held for long and a step costs one round trip.
--
-- KEYS: the posting keys (a term's zset, an agent's set), then the project's
--   word list (zset, all scored 0) when there are words
-- ARGV: how many posting keys; for each, n, then its n score/id pairs; then
--   the words.
--
-- Returns how many posting keys were written.

-- ZADD of t[from..to] (score/member pairs) in slices, so a long list never
-- exceeds what one call may unpack.
local posting_keys = KEYS
local packed = ARGV
local count = tonumber(packed[1])

local SLICE = 1000
local function zadd(key, t, from, to)
  for i = from, to, SLICE do
    redis.call("ZADD", key, unpack(t, i, math.min(i + SLICE - 1, to)))
  end
end

local a = 2
for k = 1, count do
  local n = tonumber(packed[a])
  zadd(posting_keys[k], packed, a + 1, a + 2 * n)
  a = a + 1 + 2 * n
end
if a <= #packed then
  local words = {}
  for i = a, #packed do
    words[#words + 1] = 0
    words[#words + 1] = packed[i]
  end
  zadd(posting_keys[count + 1], words, 1, #words)
end
return count
