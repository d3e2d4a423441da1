-- v2124 data augmentation: synthetic documents sampled from a trained checkpoint by the generated
-- trainer's `train sample`, added to gen data as one more input with a fixed mixing share (the
-- v2121 stage gets last_share). The `data` hook checks the trainer and checkpoint and sets the
-- share; `data_inputs` samples (only once the whole selection is valid) and writes the documents.
-- Never: samples from a trainer whose tokenizer is not the byte tokenizer (its sample output is
-- token ids), or leaves the temporary samples file behind.
local M = { id = "v2124" }

local function shell_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

function M.data(ctx, pipe)
  local trainer = ctx.param("trainer"):gsub("/+$", "")
  if trainer == "" then
    ctx.refuse("augmentation.trainer is empty", "give a trained trainer's directory: --set augmentation.trainer=out/NAME")
  end
  if hyp.stat(trainer .. "/train") ~= "file" or hyp.stat(trainer .. "/plan.json") ~= "file" then
    ctx.refuse(string.format("'%s' holds no generated trainer (train and plan.json)", trainer),
      "give the -o directory of `gen TREE --enable ... -o out/NAME`")
  end
  local plan = hyp.json_decode(hyp.read_file(trainer .. "/plan.json") or "")
  local tok = plan and plan.model and plan.model.tokenizer
  if tok ~= "byte" then
    ctx.refuse(string.format("the trainer in '%s' uses tokenizer '%s'; sampling reads text only from byte-tokenizer trainers",
      trainer, tostring(tok)), "use a trainer of a byte-tokenizer model")
  end
  local ckpt = ctx.param("ckpt")
  if ckpt == "" then ckpt = trainer .. "/ckpt" end
  if hyp.stat(ckpt) ~= "dir" then
    ctx.refuse(string.format("no checkpoint directory '%s'", ckpt),
      "train first with --ckpt-dir " .. ckpt .. ", or point --set augmentation.ckpt=DIR at one")
  end
  if not pipe.mix then ctx.refuse("needs the mixing stage", "enable mixing too") end
  pipe.mix.last_share = ctx.param("weight")
  pipe.augment = { trainer = trainer, ckpt = ckpt }
end

-- Samples the documents into a temporary .jsonl; returns {path, name, cleanup} for gen data.
function M.data_inputs(ctx, pipe, out)
  local a = pipe.augment
  local dir = assert(hyp.mkdtemp(out .. ".synthetic"))
  local path, errf = dir .. "/synthetic.jsonl", dir .. "/stderr"
  local lines = {}
  local n, len = ctx.param("documents"), ctx.param("length")
  for i = 1, n do
    -- one sequence of a small model: one thread unless the user says otherwise (OpenMP's default
    -- of every core spins badly on a busy machine: 0.56 s vs 13.8 s for 64 tokens of tiny here)
    local cmd = string.format("OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} %s sample --ckpt-dir %s --sample %d --temperature %.17g --top-k %d --seed %d --prompt %s 2>%s",
      shell_quote(a.trainer .. "/train"), shell_quote(a.ckpt), len, ctx.param("temperature"), ctx.param("top_k"),
      ctx.param("seed") + i, shell_quote(ctx.param("prompt")), shell_quote(errf))
    local f = io.popen(cmd, "r")
    local text = f:read("a")
    local ok = f:close()
    if not ok then
      local err = (hyp.read_file(errf) or ""):gsub("%s+$", ""):match("([^\n]*)$")
      hyp.rm_rf(dir)
      ctx.refuse(string.format("sampling document %d from '%s' failed: %s", i, a.ckpt, err ~= "" and err or "no message"),
        "check that `" .. a.trainer .. "/train sample --ckpt-dir " .. a.ckpt .. "` works")
    end
    -- stdout: "resumed from ...\n", then the prompt, the sampled bytes and a newline
    text = (text:match("^resumed from [^\n]*\n(.*)$") or text):gsub("\n$", "")
    text = text:gsub("[%z\1-\8\11-\31\127]", "") -- control bytes but tab and newline
    if text:match("%S") then lines[#lines + 1] = assert(hyp.json_encode({ text = text }, false)) end
  end
  if #lines == 0 then
    hyp.rm_rf(dir)
    ctx.refuse(string.format("all %d samples from '%s' were empty", n, a.ckpt), "sample longer documents (--set augmentation.length=N)")
  end
  local okw, werr = hyp.write_file(path, table.concat(lines, "\n") .. "\n", 420, true)
  if not okw then hyp.rm_rf(dir); error(werr) end
  ctx.contribute(string.format("%d synthetic documents of %d tokens from %s", #lines, len, a.ckpt))
  return { { path = path, name = string.format("<synthetic: %d samples from %s>", n, a.ckpt), cleanup = dir } }
end

function M.derive(ctx)
  ctx.contribute("data-preparation stage: `gen data --enable augmentation` samples synthetic documents from a trained checkpoint and mixes them in at a fixed share; the trainer is unchanged")
end

return M
