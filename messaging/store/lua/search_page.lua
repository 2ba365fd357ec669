-- search_page: one page of a viewer's search, newest first: the messages found
-- in every group, a group being one query word (its postings, or the postings
-- of every word a prefix expands to) or one filter.
--
-- KEYS[1..n]  zset  search postings (message id by search score), group after group
-- ARGV[1]  JSON {sizes: [keys per group], hi: "(score" | "score" | "+inf" (upper
--          bound), lo: "score" | "-inf" (lower bound), limit, scan_max (entries
--          looked at before answering with what was found), batch}
--
-- Scores are unique per message and travel as strings (Lua prints 14 digits).
-- Returns a JSON string {"ids": [message ids], "next": "score" | ""}: "next" is
-- the exclusive upper bound of the next page, "" when nothing is left.

local postings = KEYS
local a = cjson.decode(ARGV[1])
local groups, k = {}, 1
for _, n in ipairs(a.sizes) do
  local g = {}
  for _ = 1, n do
    table.insert(g, postings[k])
    k = k + 1
  end
  table.insert(groups, g)
end

-- The smallest group drives the scan; the others are checked member by member.
local driver, smallest = 1, nil
for i, g in ipairs(groups) do
  local total = 0
  for _, key in ipairs(g) do
    total = total + redis.call("ZCOUNT", key, a.lo, a.hi)
  end
  if smallest == nil or total < smallest then
    driver, smallest = i, total
  end
end

local function in_group(g, member)
  for _, key in ipairs(g) do
    if redis.call("ZSCORE", key, member) then return true end
  end
  return false
end

local function in_all(member)
  for i, g in ipairs(groups) do
    if i ~= driver and not in_group(g, member) then return false end
  end
  return true
end

local ids, scanned, hi = {}, 0, a.hi
while true do
  -- The next batch of the driver's union, newest first. Below the highest last
  -- score of a key that filled its batch, that key may hold more: stop there.
  local merged, seen, floor, full = {}, {}, nil, false
  for _, key in ipairs(groups[driver]) do
    local rows = redis.call("ZREVRANGEBYSCORE", key, hi, a.lo, "WITHSCORES", "LIMIT", 0, a.batch)
    for j = 1, #rows, 2 do
      if not seen[rows[j]] then
        seen[rows[j]] = true
        table.insert(merged, {rows[j], rows[j + 1]})
      end
    end
    if #rows == 2 * a.batch then
      full = true
      local last = tonumber(rows[#rows])
      if floor == nil or last > floor then floor = last end
    end
  end
  table.sort(merged, function(x, y) return tonumber(x[2]) > tonumber(y[2]) end)
  for _, row in ipairs(merged) do
    if floor and tonumber(row[2]) < floor then break end
    scanned = scanned + 1
    hi = "(" .. row[2]
    if in_all(row[1]) then
      table.insert(ids, row[1])
      if #ids == a.limit then return cjson.encode({ids = ids, next = row[2]}) end
    end
    if scanned >= a.scan_max then return cjson.encode({ids = ids, next = row[2]}) end
  end
  if not full then return cjson.encode({ids = ids, next = ""}) end
end
