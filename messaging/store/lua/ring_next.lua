-- ring_next: whose turn it is on one delivery queue. The ring holds the
-- projects with ready deliveries for the queue, by turn number; the project
-- with the lowest number is served and goes to the back (highest number + 1,
-- and 0 at least).
-- A project joining the ring gets a number below 0 that grows with the time it
-- joined (DeliveryStore.ring_join): it is served before every project that has
-- had a turn since, after those that joined before it. A flood whose ready set
-- empties and fills again joins again each time, behind whoever joined first.
--
-- KEYS[1]  ring  zset  project ids by turn number
--
-- Returns {the project id whose turn it is, how many projects the ring holds},
-- or false when the ring is empty.

local ring_key = KEYS[1]

local head = redis.call("ZRANGE", ring_key, 0, 0)
if #head == 0 then
  return false
end
local last = redis.call("ZRANGE", ring_key, -1, -1, "WITHSCORES")
local back = math.max(tonumber(last[2]), -1) + 1
redis.call("ZADD", ring_key, string.format("%d", back), head[1])
return {head[1], redis.call("ZCARD", ring_key)}
