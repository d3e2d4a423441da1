-- size_cli.lua — the command line of `gen size`: its flags and --help text, and the reading of the
-- parsed flags into checked values (numbers finite and in range, integers where asked, choices
-- among their values, the flags that exclude or need each other, --set items against the hardware
-- keys). size.lua computes with these values only; this module computes no size and prints
-- nothing (bad input is a U.fail naming the flag).
local U = require("util")
local C = {}

C.HELP = [[
usage: gen size (--model M | --params N --layers L --d-model D) [--hw LIST] [options]

Sizes a training run with the throughput model of seed 004 and the memory model of
generator/lua/formulas.lua. Every default is printed with its source.

what to size
  --tree FILE          the tree whose models/ and hardware/ are used (default specs/v2500.yaml)
  --model M            a model name from specs/models, or a model YAML path
  --params N           parameters N (default: counted from the model spec)
  --layers L           layers L (default: the model's n_layers)
  --d-model D          width d (default: the model's d_model)
  --hw LIST            comma list of hardware names from specs/hardware or YAML paths
                       (repeatable; default: every GPU entry in specs/hardware)
  --set [HW.]KEY=V     override a hardware number: memory_gb, hbm_tbps, nic_gbps,
                       price_per_hr, sm, peak_tflops.{fp32,tf32,bf16,fp16,fp8}; without HW.
                       it applies to every hardware (repeatable), e.g. --set h100-sxm.price_per_hr=2.5

throughput model (seed 004)
  --dtype T            bf16 | fp32 | fp8: bytes per element b, gradient bytes, the peak_tflops
                       entry used and the model-state layout (default: bf16 on GPUs — v2102
                       mixed precision; fp32 on CPUs — what the CPU runtime trains in)
  --bytes B            bytes per activation element b (default from --dtype: 2, 4 or 1)
  --grad-bytes B       gradient bytes per element b_g (default from --dtype: 2, 4 or 2)
  --opt-state S        f32 | q8: Adam's m and v in fp32 (8 B/param, the default) or 8-bit
                       block-wise quantized (v2132 state_dtype q8: 2 x (1 + 4/256) = 2.03 B/param;
                       embeddings and tensors under 4096 elements keep fp32, as bitsandbytes)
  --k-flops K          FLOPs per token per parameter k (default 6: training)
  --recompute R        none | selective | full (v2111 / v2101); sets the recompute multiplier
  --recompute-mult G   recompute multiplier g (default 1; 1.33 with full; selective: from dims)
  --opt-bytes A        optimizer traffic alpha, bytes/param/step (default 16)
  --c-act C            activation traffic coefficient c (default 6)
  --tokens-per-step B  global tokens per step B (default 512000)
  --dp P|auto          data-parallel size p (default 1; auto = the GPU count for --target-tps)
  --util U             utilization of every resource (default 0.75)
  --eff-compute E      compute efficiency e_c (default --util)
  --eff-memory E       memory efficiency e_m (default --util)
  --eff-network E      network efficiency e_n (default --util)
  --target-tps R       target tokens/s: GPUs, $/hr and cluster TB/s for it

memory per GPU
  --zero S             ZeRO stage 0..3 over the --dp ranks (default 0)
  --fsdp               FSDP full sharding (= ZeRO stage 3)
  --attention A        naive | flash (default: flash on GPUs, naive on CPUs — the CPU runtime)
  --batch B            micro-batch sequences per GPU (default: 1 on GPUs, 8 on CPUs as plan.lua)
  --seq T              sequence length (default: min(context, 4096) on GPUs, min(context, 256)
                       on CPUs as plan.lua)
  --reserve-gb G       memory kept back per GPU (default: 1 on GPUs, 0 on CPUs)
  --memory-planning M  on | off: activations as the peak of live buffers (v2167 static memory
                       planning: buffers with disjoint lifetimes share memory) or as the sum of
                       every buffer (a plan generated without v2167) (default on)

time and cost (Chinchilla, v2146/v2147)
  --tokens T           tokens to train: time and cost on the cluster
  --chinchilla         train the compute-optimal 20 × N tokens
  --mesh auto|tp=T,pp=P,cp=C
                       a dp x pp x cp x tp mesh of the --gpus: memory per GPU, bytes sent per GPU
                       per step on each axis, the pipeline bubble, a step time; auto lists the
                       best meshes that fit (a planning model: no trainer runs tp/pp/cp yet)
  --gpus G             cluster size for the time and cost (default: the GPUs for --target-tps,
                       else --dp); also the default --dp
  --flops-budget C     compute-optimal N and tokens for a budget of C FLOPs
  --clusters LIST      compare cluster shapes, e.g. 1xh100-sxm,2xh100-sxm,4xa100-40gb
                       (needs --tokens or --chinchilla)
  --fit FILE           the loss law `gen scaling fit -o FILE` fitted to your runs: --chinchilla
                       takes its compute-optimal tokens for N, and the predicted loss of the run
                       and the optimum for --flops-budget are printed with bootstrap intervals

  --plan DIR           the tokens/s per GPU from the performance model of the trainer generated
                       into DIR (gen perf: its plan and kernels, the hardware's perf section)
                       instead of the seed-004 formula; --model defaults to the plan's model

output
  --json               everything as JSON
  --plot FILE          write an SVG: a roofline per hardware with the run's point, or with
                       --target-tps a bar chart of $/hr per option
  --help               this text
]]

C.FLAGS = {
  ["--tree"] = "value", ["--model"] = "value", ["--params"] = "value", ["--layers"] = "value",
  ["--d-model"] = "value", ["--hw"] = "list", ["--set"] = "multi", ["--dtype"] = "value",
  ["--bytes"] = "value", ["--grad-bytes"] = "value", ["--k-flops"] = "value", ["--opt-state"] = "value",
  ["--recompute"] = "value", ["--recompute-mult"] = "value", ["--opt-bytes"] = "value",
  ["--c-act"] = "value", ["--tokens-per-step"] = "value", ["--dp"] = "value", ["--util"] = "value",
  ["--eff-compute"] = "value", ["--eff-memory"] = "value", ["--eff-network"] = "value",
  ["--target-tps"] = "value", ["--zero"] = "value", ["--fsdp"] = "flag", ["--attention"] = "value",
  ["--batch"] = "value", ["--seq"] = "value", ["--reserve-gb"] = "value", ["--tokens"] = "value",
  ["--chinchilla"] = "flag", ["--gpus"] = "value", ["--flops-budget"] = "value",
  ["--clusters"] = "list", ["--json"] = "flag", ["--plot"] = "value", ["--help"] = "flag",
  ["-h"] = "flag", ["--memory-planning"] = "value", ["--plan"] = "value", ["--fit"] = "value",
  ["--mesh"] = "value",
}

-- the hardware keys --set may change, and their least values
local HW_KEYS = { "hbm_tbps", "memory_gb", "nic_gbps", "peak_tflops.bf16", "peak_tflops.fp16",
  "peak_tflops.fp32", "peak_tflops.fp8", "peak_tflops.tf32", "price_per_hr", "sm" }
local HW_MIN = { memory_gb = 0.001, hbm_tbps = 1e-6, sm = 50 }

local function bad_number(flag, s, what, example)
  U.fail("<command line>", string.format("%s must be %s, not '%s'", flag, what, tostring(s)), "e.g. " .. flag .. " " .. example)
end

-- A number from the command line: finite, and > 0 (or >= 0 with allow_zero); integer if asked.
local function num(o, flag, opts)
  local s = o[flag]
  if s == nil then return nil end
  local v = tonumber(s)
  opts = opts or {}
  local what = opts.int and (opts.allow_zero and "an integer >= 0" or "a positive integer")
    or (opts.allow_zero and "a number >= 0" or "a positive number")
  if opts.max then what = what .. " <= " .. U.fmt_value(opts.max) end
  if not v or v ~= v or v == math.huge or v == -math.huge then bad_number(flag, s, what, opts.example or "1") end
  if v < 0 or (v == 0 and not opts.allow_zero) then bad_number(flag, s, what, opts.example or "1") end
  if opts.int and v ~= math.floor(v) then bad_number(flag, s, what, opts.example or "1") end
  if opts.max and v > opts.max then bad_number(flag, s, what, opts.example or "1") end
  if opts.int then v = math.tointeger(v) or v end
  return v
end

local function choice(o, flag, values)
  local v = o[flag]
  if v == nil then return nil end
  for _, x in ipairs(values) do if v == x then return v end end
  U.fail("<command line>", string.format("%s '%s' is not one of %s%s", flag, v, table.concat(values, " | "),
    U.did_you_mean(v, values)), "use one of " .. table.concat(values, ", "))
end

local function tree_dir(o)
  local path = o["--tree"]
  if not path then
    path = "specs/v2500.yaml"
    if hyp.stat(path) ~= "file" and hyp.home then path = hyp.home .. "/specs/v2500.yaml" end
  end
  local st = hyp.stat(path)
  if st ~= "file" then
    U.fail(path, st == "dir" and "is a directory, not the tree file" or "no such file",
      "give the tree file with --tree, e.g. --tree specs/v2500.yaml")
  end
  -- gen size needs only the tree's models/ and hardware/ next to it (T.load_model and
  -- T.load_hardware validate those files with the same schemas as the generator)
  return { path = path, dir = U.dirname(path) }
end

-- --set [HW.]KEY=VALUE, applied to the loaded hardware list (names in hws_by_name).
function C.parse_sets(o, hw_names)
  local sets = {}
  for _, item in ipairs(o["--set"] or {}) do
    local key, val = item:match("^([^=]+)=(.*)$")
    if not key then
      U.fail("<command line>", "--set '" .. item .. "' is not KEY=VALUE", "e.g. --set h100-sxm.price_per_hr=2.5")
    end
    local target
    for _, n in ipairs(hw_names) do
      if key:sub(1, #n + 1) == n .. "." then
        if not target or #n > #target then target = n end
      end
    end
    local k = target and key:sub(#target + 2) or key
    local known = false
    for _, x in ipairs(HW_KEYS) do if x == k then known = true end end
    if not known then
      local first = key:match("^([^.]+)%.")
      if not target and first and first ~= "peak_tflops" then
        U.fail("<command line>", string.format("--set %s: no hardware '%s' among --hw%s", item, first,
          U.did_you_mean(first, hw_names)), "use one of: " .. table.concat(hw_names, ", ") .. " (or add it to --hw)")
      end
      U.fail("<command line>", string.format("--set %s: unknown hardware key '%s'%s", item, k, U.did_you_mean(k, HW_KEYS)),
        "use one of: " .. table.concat(HW_KEYS, ", "))
    end
    local v = tonumber(val)
    if not v or v ~= v or v == math.huge or v < (HW_MIN[k] or 0) then
      U.fail("<command line>", string.format("--set %s: %s must be a number >= %s", item, k, U.fmt_value(HW_MIN[k] or 0)),
        "e.g. --set " .. key .. "=2.5")
    end
    sets[#sets + 1] = { hw = target, key = k, value = v, text = item }
  end
  return sets
end

-- The options of `gen size` from the parsed flags o (cli.lua's parse with C.FLAGS): a copy of o
-- in which every numeric flag holds its checked number and every choice its checked value, plus
-- `tree` ({path, dir}) and `cluster_items` ({n, spec} per --clusters item).
function C.read(o)
  local q = {}
  for k, v in pairs(o) do q[k] = v end
  if o["--help"] or o["-h"] then return q end
  q.tree = tree_dir(o)
  q["--params"] = num(o, "--params", { example = "7e9" })
  q["--layers"] = num(o, "--layers", { int = true, example = "32" })
  q["--d-model"] = num(o, "--d-model", { int = true, example = "4096" })
  q["--seq"] = num(o, "--seq", { int = true, example = "256" })
  q["--k-flops"] = num(o, "--k-flops", { example = "6" })
  q["--opt-bytes"] = num(o, "--opt-bytes", { allow_zero = true, example = "16" })
  q["--c-act"] = num(o, "--c-act", { allow_zero = true, example = "6" })
  q["--tokens-per-step"] = num(o, "--tokens-per-step", { example = "512000" })
  for _, f in ipairs({ "--util", "--eff-compute", "--eff-memory", "--eff-network" }) do
    q[f] = num(o, f, { max = 1, example = "0.75" })
  end
  if q["--opt-bytes"] == 0 and q["--c-act"] == 0 then
    U.fail("<command line>", "--opt-bytes and --c-act are both 0: the run would move no bytes", "give one of them a positive value")
  end
  q["--recompute"] = choice(o, "--recompute", { "none", "selective", "full" })
  q["--recompute-mult"] = num(o, "--recompute-mult", { example = "1.33" })
  q["--target-tps"] = num(o, "--target-tps", { example = "2e5" })
  q["--gpus"] = num(o, "--gpus", { int = true, example = "8" })
  if o["--dp"] == "auto" then
    if not q["--target-tps"] then U.fail("<command line>", "--dp auto needs --target-tps", "give --target-tps R or a number for --dp") end
  else
    q["--dp"] = num(o, "--dp", { int = true, example = "8" })
  end
  q["--zero"] = num(o, "--zero", { allow_zero = true, int = true, max = 3, example = "3" })
  if o["--fsdp"] and q["--zero"] and q["--zero"] ~= 3 then
    U.fail("<command line>", "--fsdp shards like ZeRO stage 3 but --zero " .. q["--zero"] .. " was given", "drop one of them")
  end
  q["--memory-planning"] = choice(o, "--memory-planning", { "on", "off" })
  q["--tokens"] = num(o, "--tokens", { example = "2e9" })
  if o["--chinchilla"] and q["--tokens"] then
    U.fail("<command line>", "--tokens and --chinchilla both give the token count", "keep one")
  end
  q["--flops-budget"] = num(o, "--flops-budget", { example = "1e21" })
  q.cluster_items = {}
  for _, c in ipairs(o["--clusters"] or {}) do
    local n, name = c:match("^(%d+)[xX×](.+)$")
    if not n or tonumber(n) < 1 then
      U.fail("<command line>", "--clusters item '" .. c .. "' is not COUNTxHARDWARE", "e.g. --clusters 1xh100-sxm,2xh100-sxm,4xa100-40gb")
    end
    q.cluster_items[#q.cluster_items + 1] = { n = math.tointeger(tonumber(n)), spec = name }
  end
  q["--dtype"] = choice(o, "--dtype", { "bf16", "fp32", "fp8" })
  q["--bytes"] = num(o, "--bytes", { example = "2" })
  q["--grad-bytes"] = num(o, "--grad-bytes", { example = "2" })
  q["--opt-state"] = choice(o, "--opt-state", { "f32", "q8" })
  q["--attention"] = choice(o, "--attention", { "naive", "flash" })
  q["--batch"] = num(o, "--batch", { int = true, example = "8" })
  q["--reserve-gb"] = num(o, "--reserve-gb", { allow_zero = true, example = "1" })
  return q
end

return C
