-- keys_lib: naming the keys a script is given in groups, one group per item
-- (a delivery, a recipient, a subscription). Prepended to the scripts that
-- use it; functions only, no key of its own.

-- `count` groups of #names keys, one after another from keys[base] on; group
-- i names its keys by `names`, in order: key_groups(KEYS, 6, 2, {"dlv",
-- "events"}) is {{dlv = KEYS[6], events = KEYS[7]}, {dlv = KEYS[8], events = KEYS[9]}}.
local function key_groups(keys, base, count, names)
  local out = {}
  for i = 1, count do
    local group, first = {}, base + (i - 1) * #names
    for j, name in ipairs(names) do group[name] = keys[first + j - 1] end
    out[i] = group
  end
  return out
end
