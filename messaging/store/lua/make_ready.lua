-- make_ready: deliveries join their project's ready set for one transport, the
-- set that workers take from (oldest first) when the project's turn comes.
-- Scores come from the project's sequence, so deliveries made ready together
-- are taken in the order given (admission order), never by their ids.
--
-- KEYS[1]  project  hash    the project (its `lane` field)
-- KEYS[2]  ready    zset    delivery ids of one transport by when they became ready
-- KEYS[3]  seq      string  the project's monotonic sequence
--
-- ARGV[1..]  delivery ids, in order (already there: kept where they are)
--
-- Returns {added, the project's lane ("" for the shared queues), ready count}.

local added = 0
for i = 1, #ARGV do
  if not redis.call("ZSCORE", KEYS[2], ARGV[i]) then
    redis.call("ZADD", KEYS[2], redis.call("INCR", KEYS[3]), ARGV[i])
    added = added + 1
  end
end
return {added, redis.call("HGET", KEYS[1], "lane") or "", redis.call("ZCARD", KEYS[2])}
