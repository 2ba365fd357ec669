-- index_message: add messages to the project's search postings and to the sets
-- of the agents that see them (idempotent: a message is the same member with
-- the same score every time). One call carries a few messages (a worker's
-- step), so the store is never held for long and a step costs one round trip.
--
-- KEYS, message after message:
--   n postings  zset  one per term, then one per agent that sees the message:
--                     message id by score
--   words       zset  the project's indexed words (score 0), only when the
--                     message has words
-- ARGV, message after message: its score, its id, n, w (how many words), then
--   its w words.
--
-- Returns how many messages were indexed.

local k, a, done = 1, 1, 0
while a <= #ARGV do
  local score, id = ARGV[a], ARGV[a + 1]
  local n, w = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  for i = k, k + n - 1 do
    redis.call("ZADD", KEYS[i], score, id)
  end
  k = k + n
  if w > 0 then
    local words = {}
    for i = a + 4, a + 3 + w do
      words[#words + 1] = 0
      words[#words + 1] = ARGV[i]
    end
    redis.call("ZADD", KEYS[k], unpack(words))
    k = k + 1
  end
  a = a + 4 + w
  done = done + 1
end
return done
