-- trim_index_queue: drop the entries an indexer has just indexed from the head of
-- the project's search queue, only if they are still its head. Another indexer
-- that took the same entries and trimmed first leaves a different head, and
-- then nothing is dropped: an entry leaves the queue only once it is indexed.
--
-- KEYS[1]     queue  list  "<ms> <message_id> <agent_id> <sender_id>", oldest first
-- ARGV[1..n]  the entries indexed, as read from the head
--
-- Returns 1 when they were dropped, 0 when the head had changed.

local queue_key = KEYS[1]
local entries = ARGV

local head = redis.call("LRANGE", queue_key, 0, #entries - 1)
if #head ~= #entries then return 0 end
for i = 1, #entries do
  if head[i] ~= entries[i] then return 0 end
end
redis.call("LTRIM", queue_key, #entries, -1)
return 1
