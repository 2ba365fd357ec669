-- expire_lease: a non-idempotent transport's worker held the lease past its
-- end without recording an outcome (it died, or hangs). If its request was
-- handed off (mark_handed_off), whether it reached the receiver cannot be
-- known: record `unknown`. If not, nothing was sent: record `failed`. Never
-- retry; raise the fence so the old holder can no longer record anything.
-- Whether the lease has ended is the store's clock's to say (clock_lib), and
-- the attempt ends at the store's time.
-- uses: clock_lib, outcome_lib
--
-- KEYS[1]  due     zset    delivery ids by due time (ms)
-- KEYS[2]  dlv     hash    the delivery
-- KEYS[3]  events  stream  the sender's events
-- KEYS[4]  stats   hash    delivery counters
--
-- ARGV[1]  error text for the attempt when the request was handed off
-- ARGV[2]  events stream cap (approximate MAXLEN)
-- ARGV[3]  the dispatch latency buckets' upper bounds, ms, space-separated,
--          the last `inf` (see dispatch_latency in outcome_lib)
-- ARGV[4]  error text for the attempt when nothing was handed off
--
-- Idle notices come from `courier`, which has no event stream to tell.
--
-- Returns "unknown" or "failed" as recorded, 0 when the lease is still valid or free.

local due_key = KEYS[1]
local dlv = KEYS[2]
local events_key = KEYS[3]
local stats_key = KEYS[4]
local error_sent = ARGV[1]
local events_cap = ARGV[2]
local latency_bounds = ARGV[3]
local error_not_sent = ARGV[4]
local now = clock_us()
local now_ms = math.floor(now / 1000)
local now_us = time_text(now)

local fence, lease_until_ms, attempts_json, id, stage, message_id, recipient,
  handed_off_fence, sender_id, admitted_us = unpack(redis.call("HMGET", dlv, "fence",
    "lease_until_ms", "attempts", "id", "stage", "message_id", "recipient",
    "handed_off_fence", "sender_id", "admitted_us"))
local lease = tonumber(lease_until_ms or "0")
if lease == 0 or lease >= now_ms then
  return 0
end
local outcome, err = "unknown", error_sent
if handed_off_fence ~= fence then
  outcome, err = "failed", error_not_sent
end
-- The fence first: whatever happens next, the old holder can no longer record.
redis.call("HSET", dlv, "fence", tonumber(fence) + 1)
local counts = new_counts()
stage = close_attempt(dlv, attempts_json, stage, outcome, err, now_us, false)
settle_outcome({due = due_key, counts = counts, events = events_key,
  events_cap = events_cap, delivery_id = id, message_id = message_id, recipient = recipient,
  sender_id = sender_id, stage = stage, outcome = outcome, latency_bounds = latency_bounds,
  admitted_us = admitted_us, now = now, observed = false})
add_counts(stats_key, counts)
return outcome
