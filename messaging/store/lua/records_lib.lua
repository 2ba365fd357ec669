-- records: writing Courier's stored records, shared by every script that
-- creates a delivery (prepended; functions only). Field names follow
-- messaging/store/schema.py (DeliveryField).

-- Write a new delivery hash. d: {id, message_id, agent_id, sender_id,
-- recipient, transport, policy, stage, target, held, now_us}; a pending
-- target has agent_id and transport "" and stage "admitted".
local function write_delivery(dlv, d)
  local fields = {
    "id", d.id, "message_id", d.message_id, "agent_id", d.agent_id, "sender_id", d.sender_id,
    "recipient", d.recipient, "transport", d.transport, "policy", d.policy,
    "stage", d.stage, "target", d.target, "held", d.held and 1 or 0,
    "admitted_us", d.now_us, "fence", 0, "lease_until_ms", 0, "retry_at_ms", 0,
    "attempts", "[]"}
  if d.stage == "target_selected" then
    table.insert(fields, "target_selected_us")
    table.insert(fields, d.now_us)
  end
  redis.call("HSET", dlv, unpack(fields))
end

-- `Name [ref]`: the label that always resolves exactly (the project's human,
-- which has no ref, is just `human`).
local function agent_label(ag)
  if type(ag.ref) ~= "string" or ag.ref == "" then return ag.name end
  return ag.name .. " [" .. ag.ref .. "]"
end

-- An agent's presence as observations show it at now_us: a busy or idle report
-- past its lease (presence_until_us) is unknown again.
local function presence_of(ag, now_us)
  if type(ag.presence) ~= "string" then return "unknown" end
  local until_us = tonumber(ag.presence_until_us)
  if until_us and now_us and until_us < tonumber(now_us) then return "unknown" end
  return ag.presence
end
