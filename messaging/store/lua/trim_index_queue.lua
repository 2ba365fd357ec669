-- trim_index_queue: drop the entries an indexer has just indexed from the head of
-- the project's search queue, only if they are still its head. Another indexer
-- that took the same entries and trimmed first leaves a different head, and
-- then nothing is dropped: an entry leaves the queue only once it is indexed.
--
-- KEYS[1]     queue  list  "<ms> <message_id> <agent_id> <sender_id>", oldest first
-- ARGV[1..n]  the entries indexed, as read from the head
--
-- Returns 1 when they were dropped, 0 when the head had changed.

local head = redis.call("LRANGE", KEYS[1], 0, #ARGV - 1)
if #head ~= #ARGV then return 0 end
for i = 1, #ARGV do
  if head[i] ~= ARGV[i] then return 0 end
end
redis.call("LTRIM", KEYS[1], #ARGV, -1)
return 1
