-- tokenizer_cli.lua — `gen tokenizer train|encode|decode|info` (v2125): argument checks and
-- messages; the work is runtime/tok/tokenizer.c through generator/tok_lua.c (hyp.tok_*). Returns
-- the exit status; bad arguments fail with one line (U.fail, exit 2). Never tokenizes in Lua.
local U = require("util")
local M = {}

function M.main(args, parse)
  local sub = args[1]
  local rest = { table.unpack(args, 2) }
  local subs = { "train", "encode", "decode", "info" }
  if not hyp.tok_train then U.fail("<command line>", "this gen was built without the tokenizer", "rebuild") end
  if sub == "train" then
    local o = parse(rest, { ["-o"] = "value", ["--vocab"] = "value" })
    local example = "e.g. gen tokenizer train data/kjv.txt --vocab 8192 -o data/kjv-bpe"
    if #o._pos == 0 then U.fail("<command line>", "gen tokenizer train needs text files", example) end
    if not o["-o"] then U.fail("<command line>", "gen tokenizer train needs -o DIR", example) end
    local v = tonumber(o["--vocab"] or "")
    if not v or v ~= math.floor(v) then U.fail("<command line>", "gen tokenizer train needs --vocab N (an integer)", example) end
    local rc, msg = hyp.tok_train(o._pos, math.tointeger(v), o["-o"])
    if rc ~= 0 then io.stderr:write(msg, "\n"); return rc end
    local irc, info = hyp.tok_info(o["-o"] .. "/tokenizer.json")
    if irc ~= 0 then io.stderr:write(info, "\n"); return irc end
    io.write(msg, string.format("; vocab %d, <|endoftext|> = %d, xxh3 %s\n", info.vocab, info.eot, info.hash))
    if info.vocab < v then
      io.write(string.format("gen: note: vocab %d < --vocab %d: every pre-token of the corpus is already one token (no pair left to merge)\n",
        info.vocab, math.tointeger(v)))
    end
    return 0
  elseif sub == "encode" or sub == "decode" or sub == "info" then
    local o = parse(rest, {})
    local example = "e.g. gen tokenizer " .. sub .. " data/kjv-bpe/tokenizer.json" .. (sub == "info" and "" or " [FILE]")
    if #o._pos < 1 or #o._pos > (sub == "info" and 1 or 2) then
      U.fail("<command line>", "gen tokenizer " .. sub .. " takes a tokenizer (tokenizer.json, a tiktoken file or byte)" ..
        (sub == "info" and "" or " and at most one input file (default stdin)"), example)
    end
    if sub == "info" then
      local rc, info = hyp.tok_info(o._pos[1])
      if rc ~= 0 then io.stderr:write(info, "\n"); return rc end
      io.write(string.format("kind %s\nvocab_size %d\neot_id %d\nxxh3_64 %s\n", info.kind, info.vocab, info.eot, info.hash))
      return 0
    end
    local rc, msg = (sub == "encode" and hyp.tok_encode or hyp.tok_decode)(o._pos[1], o._pos[2])
    if rc ~= 0 then io.stderr:write(msg, "\n"); return rc end
    return 0
  end
  U.fail("<command line>", "gen tokenizer needs one of " .. table.concat(subs, ", ") ..
    (sub and (" (not '" .. sub .. "')" .. U.did_you_mean(sub, subs)) or ""), "e.g. gen tokenizer train data/kjv.txt --vocab 8192 -o data/kjv-bpe")
end

return M
