-- v2125 byte-level BPE: the tokenizer itself is runtime/tok/tokenizer.c (gen tokenizer, gen data
-- --tokenizer, the trainer's checks and `train sample`); this module sizes the model to the data.
-- With param data (a gen data --tokenizer output directory, or a tokenizer file) the `model` hook
-- sets the model's vocab_size and tokenizer to the data's ("gpt2" for GPT-2's vocabulary, else
-- "bpe"), so that the trainer's data check (runtime/data/data_tok.c) passes, and the audit gets the
-- corpus's bytes per token. Without it the model file's vocabulary stays (said in the audit).
-- Never: tokenizes anything at gen time, or guesses a vocabulary it cannot read.
local M = { id = "v2125" }

local GPT2_HASH = "3cb2fbe95939bd2d" -- xxh3_64 of GPT-2's ranks (assets/tokenizers/README.md)

-- {vocab, eot, kind, hash, bytes, tokens, docs, from} of a data dir or tokenizer file, or fails.
local function read_source(ctx, path)
  local fix = "give a directory written by gen data --tokenizer, or a tokenizer.json / tiktoken ranks file"
  local kind = hyp.stat(path)
  if kind == "dir" then
    local txt = hyp.read_file(path .. "/meta.json")
    if not txt then ctx.refuse("data=" .. path .. ": no meta.json there", fix) end
    local ok, m = pcall(hyp.json_decode, txt)
    if not ok or type(m) ~= "table" or not m.vocab_size then ctx.refuse("data=" .. path .. ": meta.json is damaged", "re-run gen data") end
    local bytes = 0
    for _, s in ipairs(m.sources or {}) do bytes = bytes + (s.bytes or 0) end
    return { vocab = math.tointeger(m.vocab_size), eot = m.eot_id and math.tointeger(m.eot_id) or -1, kind = m.tokenizer or "byte",
      hash = m.tokenizer_xxh3_64 or "", bytes = bytes, tokens = (m.train_tokens or 0) + (m.val_tokens or 0),
      docs = m.eot_id and #(m.sources or {}) or 0, from = path .. "/meta.json" }
  elseif kind == "file" then
    if not hyp.tok_info then ctx.refuse("this gen was built without the tokenizer", "rebuild") end
    local rc, info = hyp.tok_info(path)
    if rc ~= 0 then ctx.refuse("data=" .. path .. ": " .. info, fix) end
    return { vocab = info.vocab, eot = info.eot, kind = info.kind, hash = info.hash, from = path }
  end
  ctx.refuse("data=" .. path .. ": no such file or directory", fix)
end

function M.model(ctx, m)
  local path = ctx.param("data")
  if not path or path == "" then
    ctx.decide("model.vocab_size", m.vocab_size, "v2125 enabled without --set v2125.data=DIR: the model file's vocabulary (tokenizer " ..
      tostring(m.tokenizer or "byte") .. "); gen data --tokenizer and the trainer still check data against it")
    ctx.contribute(string.format("vocabulary of model %s kept (%s, vocab %d): give --set v2125.data=DIR (gen data --tokenizer) to size it to a BPE",
      tostring(m.name), tostring(m.tokenizer or "byte"), m.vocab_size))
    return
  end
  local src = read_source(ctx, path)
  if src.kind == "byte" then
    ctx.decide("model.vocab_size", m.vocab_size, path .. " is byte-level data: the model file's vocabulary (>= 256) stays")
    ctx.contribute(string.format("data %s is byte-level: vocab %d kept", path, m.vocab_size))
    return
  end
  local tok = (src.hash == GPT2_HASH or (src.vocab == 50257 and src.eot == 50256)) and "gpt2" or "bpe"
  ctx.decide("model.vocab_size", src.vocab, string.format("v2125: the vocabulary of %s (%s %s, EOT %d); the model file said %d",
    src.from, src.kind, src.hash ~= "" and ("xxh3 " .. src.hash) or "", src.eot, m.vocab_size))
  ctx.decide("model.tokenizer", tok, "v2125: the trainer checks the data's tokenizer against it")
  local was = m.vocab_size
  m.vocab_size, m.tokenizer = src.vocab, tok
  local bpt = ""
  if src.bytes and src.tokens and src.tokens > src.docs then
    bpt = string.format("; corpus: %d bytes in %d tokens = %.3f bytes/token", src.bytes, src.tokens - src.docs,
      src.bytes / (src.tokens - src.docs))
  end
  ctx.contribute(string.format("model %s sized to the data's tokenizer: vocab_size %d -> %d (tokenizer %s: %s file, xxh3 %s)%s", tostring(m.name), was,
    src.vocab, tok, src.kind, src.hash, bpt))
end

return M
