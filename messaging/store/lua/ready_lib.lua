-- ready_lib: a delivery joining its project's ready set for one transport, the
-- set that workers take from (oldest first) when the project's turn comes, and
-- what the set counts; shared by make_ready and admit_message (prepended;
-- functions only). Scores come from the project's sequence, so deliveries are
-- taken in the order they became ready, never by their ids.

-- Add one delivery id to a ready zset, scored by the next project sequence;
-- one already there keeps its place. Returns 1 when it was added, else 0.
local function ready_delivery(ready_key, seq_key, delivery_id)
  if redis.call("ZSCORE", ready_key, delivery_id) then
    return 0
  end
  redis.call("ZADD", ready_key, redis.call("INCR", seq_key), delivery_id)
  return 1
end

-- How many deliveries a ready zset holds for the publisher's count, a turn a
-- worker holds open on it (take_ready) counting as one ahead of them: what
-- joins then rides on that turn rather than asking for a ticket.
local function ready_count(ready_key, turn_key)
  return redis.call("ZCARD", ready_key) + redis.call("EXISTS", turn_key)
end
