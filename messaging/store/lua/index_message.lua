-- index_message: add one message to the project's search postings and to the
-- sets of the agents that see it (idempotent: the message is the same member
-- with the same score every time). One call per message, so the store is never
-- held for long by a batch's indexing.
--
-- KEYS[1..n]   postings  zset  one per term, then one per agent that sees the
--                              message: message id by score
-- KEYS[n+1]    words     zset  the project's indexed words (score 0), only
--                              when the message has words
--
-- ARGV[1]   the message's score
-- ARGV[2]   the message id
-- ARGV[3]   n, how many of KEYS are postings
-- ARGV[4..] the message's words
--
-- Returns n.

local n = tonumber(ARGV[3])
for i = 1, n do
  redis.call("ZADD", KEYS[i], ARGV[1], ARGV[2])
end
if #ARGV > 3 then
  local words = {}
  for i = 4, #ARGV do
    words[#words + 1] = 0
    words[#words + 1] = ARGV[i]
  end
  for k = n + 1, #KEYS do
    redis.call("ZADD", KEYS[k], unpack(words))
  end
end
return n
