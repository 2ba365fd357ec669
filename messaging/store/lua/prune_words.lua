-- prune_words: take words that no stored message carries any more out of the
-- project's word list (the one prefixes expand over), so the list holds the
-- words of what is stored, not of everything ever indexed. Atomic per call, so
-- a message indexed meanwhile either came first (its posting exists: the word
-- stays) or puts the word back itself.
--
-- KEYS[1]     words     zset  the project's indexed words (score 0)
-- KEYS[2..n]  postings  zset  the posting of each word, in ARGV's order
-- ARGV[1..]   the words
--
-- Returns how many words were taken out.

local words_key = KEYS[1]
local words = ARGV
-- KEYS[i + 1] is the posting of words[i]
local postings = {}
for i = 1, #words do postings[i] = KEYS[i + 1] end

local pruned = 0
for i = 1, #words do
  if redis.call("EXISTS", postings[i]) == 0 then
    pruned = pruned + redis.call("ZREM", words_key, words[i])
  end
end
return pruned
