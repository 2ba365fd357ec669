-- lease_deliveries: take the dispatch lease of each of the given deliveries
-- that is free (lease_lib says which are), with a fresh fencing token.
-- uses: lease_lib
--
-- KEYS[1]     due        zset  delivery ids by due time (ms)
-- KEYS[2]     agents     hash  agent_id -> agent JSON (a webhook endpoint's health)
-- KEYS[3]     in_flight  zset  "<agent_id> <delivery_id>" of capped requests under
--                              way, by slot end (ms)
-- KEYS[4..]   dlv        hash  one delivery each
--
-- ARGV[1]  lease length, ms
-- ARGV[2]  "1" when the transport is idempotent by delivery id (an expired
--          lease may then be taken over), "0" otherwise
-- ARGV[3]  requests of the project under way at once, at most ("0": no cap)
-- ARGV[4]  requests to one recipient's endpoint under way at once, at most ("0": no cap)
-- ARGV[5]  how long a delivery left for a cap waits before it is due again, ms
-- ARGV[6]  how long a capped request's slot lasts unless renewed (renew_slots), ms
--
-- Returns lease_free's {leased, busy}: each delivery by its place among the
-- delivery hashes (from 1: KEYS[4] is 1).

local due_key = KEYS[1]
local agents_key = KEYS[2]
local in_flight_key = KEYS[3]
local dlv_keys = {}
for i = 4, #KEYS do dlv_keys[i - 3] = KEYS[i] end
local lease_ms = tonumber(ARGV[1])
local idempotent = ARGV[2]
local project_cap = tonumber(ARGV[3])
local endpoint_cap = tonumber(ARGV[4])
local busy_ms = tonumber(ARGV[5])
local slot_ms = tonumber(ARGV[6])

return lease_free(due_key, agents_key, in_flight_key, dlv_keys, lease_ms, idempotent,
  project_cap, endpoint_cap, busy_ms, slot_ms)
