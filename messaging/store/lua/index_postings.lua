-- index_postings: add messages to their viewers' search postings in one call
-- (idempotent: a message is the same member with the same score every time).
--
-- KEYS[..]  per group, in order: the viewer's word list (zset, only when the
--           group has words), then one postings zset per term
--
-- ARGV[1]   JSON [{m: message id, s: score (decimal string), t: how many
--           terms, w: [words]}, ...], one group per (message, viewer)
--
-- Returns how many postings were written.

local CHUNK = 500
local k, written = 1, 0
for _, g in ipairs(cjson.decode(ARGV[1])) do
  local words = g.w
  if #words > 0 then
    for first = 1, #words, CHUNK do
      local args = {}
      for i = first, math.min(first + CHUNK - 1, #words) do
        args[#args + 1] = 0
        args[#args + 1] = words[i]
      end
      redis.call("ZADD", KEYS[k], unpack(args))
    end
    k = k + 1
  end
  for _ = 1, g.t do
    redis.call("ZADD", KEYS[k], g.s, g.m)
    k = k + 1
    written = written + 1
  end
end
return written
