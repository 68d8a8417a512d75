--- rl.recipe.hooks: slime's hook flags (--rollout-function-path, --custom-generate-function-path,
--- ...): each names a Lua function, FILE.lua[:FUNCTION] or MODULE.FUNCTION, that replaces one
--- step of the job. The file is watched like the reward (rl.reload): an edit takes effect at
--- the next step, a broken edit is logged and the previous version keeps running.
---
--- Signatures mirror slime's, with `args` the parsed flags (opt) and, last, the rl.rollout
--- the job runs (its steps ro:generate, ro:generate_and_rm_group, ro:sampling_params, ro.url
--- are there to build on). docs/recipes.md#hooks has one example of each.
local log = require "rl.log"

local M = {}

-- flag → default FUNCTION when the spec names a file only, and the signature (help).
M.HOOKS = {
  rollout_function_path = { fn = "generate_rollout",
    sig = "generate_rollout(args, rollout_id, data_source, evaluation, ro) -> groups[, metrics]: the whole rollout step; "
      .. "also the eval pass (evaluation = true, data_source = the eval sets) unless --eval-function-path" },
  eval_function_path = { fn = "generate_rollout",
    sig = "generate_rollout(args, rollout_id, eval_sets, true, ro) -> {NAME = {rewards, truncated, samples}}[, metrics]" },
  custom_generate_function_path = { fn = "generate",
    sig = "generate(args, sample, sampling_params, evaluation, ro) -> sample or a list of samples" },
  custom_reward_post_process_path = { fn = "post_process_rewards",
    sig = "post_process_rewards(args, samples) -> raw_rewards, rewards (one per sample)" },
  custom_convert_samples_to_train_data_path = { fn = "convert_samples_to_train_data",
    sig = "convert_samples_to_train_data(args, samples) -> {tokens, response_lengths, rewards, loss_masks, ...}" },
  data_source_path = { fn = "data_source",
    sig = "data_source(args, tokenizer) -> a source with get_samples(n_prompts, n_samples_per_prompt) "
      .. "[, state(), load_state(st), add_samples(groups), size()]" },
  custom_rollout_log_function_path = { fn = "log_rollout_data",
    sig = "log_rollout_data(rollout_id, args, samples, extra_metrics, rollout_time) -> true to skip the default rollout/ metrics" },
  custom_eval_rollout_log_function_path = { fn = "log_eval_rollout_data",
    sig = "log_eval_rollout_data(rollout_id, args, results, extra_metrics) -> true to skip the default eval/ metrics" },
  dynamic_sampling_filter_path = { fn = "dynamic_filter",
    sig = "dynamic_filter(args, group) -> true/false or {keep, reason}: keep a group in the batch (the recipe's filter's place)" },
  rollout_sample_filter_path = { fn = "sample_filter",
    sig = "sample_filter(args, groups): after the batch is full, mark samples (sample.remove_sample = true)" },
  rollout_all_samples_process_path = { fn = "all_samples_process",
    sig = "all_samples_process(args, all_groups, data_source): every generated group, kept or filtered" },
}
M.ORDER = { "rollout_function_path", "eval_function_path", "custom_generate_function_path",
            "custom_reward_post_process_path", "custom_convert_samples_to_train_data_path", "data_source_path",
            "custom_rollout_log_function_path", "custom_eval_rollout_log_function_path",
            "dynamic_sampling_filter_path", "rollout_sample_filter_path", "rollout_all_samples_process_path" }

-- slime's own Python defaults: a launch script that names them gets rlhost's built-in.
M.SLIME_DEFAULTS = {
  rollout_function_path = { ["slime.rollout.sglang_rollout.generate_rollout"] = "default",
                            ["slime.rollout.sleep_rollout.sleep"] = "sleep",
                            ["vime.rollout.vllm_rollout.generate_rollout"] = "default",   -- vime's (vLLM) names
                            ["vime.rollout.sleep_rollout.sleep"] = "sleep" },
  eval_function_path = { ["slime.rollout.sglang_rollout.generate_rollout"] = "default",
                         ["vime.rollout.vllm_rollout.generate_rollout"] = "default" },
  data_source_path = { ["slime.rollout.data_source.RolloutDataSourceWithBuffer"] = "default",
                       ["slime.rollout.data_source.RolloutDataSource"] = "default" },
  dynamic_sampling_filter_path = {
    ["slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std"] = "nonzero_std" },
}

--- The flags, as rl.args specs (spliced into rl.recipe.options).
function M.flags()
  local out = {}
  for _, name in ipairs(M.ORDER) do
    out[#out + 1] = { name = name, type = "string", help = "FILE.lua[:FUNCTION] or MODULE.FUNCTION: " .. M.HOOKS[name].sig }
  end
  return out
end

local function flag(name) return "--" .. name:gsub("_", "-") end

local function usage(name, spec, msg)
  require("rl.args").usage_error(("%s %s: %s"):format(flag(name), spec, msg))
end

--- The function a hook spec names, reloadable: FILE.lua[:FUNCTION] (FUNCTION default
--- `default_fn`) or MODULE.FUNCTION (a module on package.path). A spec that cannot be
--- loaded, or names no function, is a usage error naming `name`'s flag.
function M.load(name, spec, default_fn)
  local reload = require "rl.reload"
  local file, fname = spec:match("^(.-%.lua):?([%w_]*)$")
  local module, fn
  if file then
    module, fn = file, fname ~= "" and fname or default_fn
  else
    module, fn = spec:match("^(.+)%.([%w_]+)$")
    if not module or not package.searchpath(module, package.path) then
      local hint = spec:match("^slime%.") and "a Python hook; rlhost's hooks are Lua: FILE.lua[:FUNCTION] or "
        .. "MODULE.FUNCTION (docs/recipes.md#hooks)" or "no such Lua file or module (give FILE.lua[:FUNCTION], or "
        .. "MODULE.FUNCTION with MODULE on package.path, e.g. next to the recipe)"
      usage(name, spec, hint)
    end
  end
  local ok, w = pcall(reload.watch, module)
  if not ok then usage(name, spec, tostring(w):gsub("^rl%.reload%.watch: ", "")) end
  if type(w.module) ~= "table" or type(w.module[fn]) ~= "function" then
    usage(name, spec, ("%s defines no function '%s' (it returns %s; give FILE.lua:FUNCTION)"):format(module, fn,
      type(w.module) == "table" and "a table without it" or type(w.module)))
  end
  return w:fn(fn)
end

--- The hooks the flags name: {<flag name> = function, ...}; a slime default maps to
--- rlhost's built-in (nothing set, or opt.rollout_function = "sleep" for slime's sleep).
function M.from_options(opt)
  local hooks = {}
  for _, name in ipairs(M.ORDER) do
    local spec = opt[name]
    if spec then
      local builtin = M.SLIME_DEFAULTS[name] and M.SLIME_DEFAULTS[name][spec]
      if builtin == "sleep" then
        opt.rollout_function = "sleep"
      elseif builtin == "nonzero_std" then
        opt.dynamic_sampling_filter = "nonzero_std"
      elseif not builtin then
        hooks[name] = M.load(name, spec, M.HOOKS[name].fn)
        log.info("%s: %s", flag(name), spec)
      end
    end
  end
  return hooks
end

-- A rollout function's result: groups (a list of sample lists) from groups, a flat list,
-- or slime's RolloutFnTrainOutput-like {samples = ..., metrics = ...}.
local function as_groups(r, where)
  if type(r) ~= "table" then error(where .. " returned " .. type(r) .. " (a list of sample groups expected)", 0) end
  local metrics
  if r.samples then r, metrics = r.samples, r.metrics end
  if r[1] ~= nil and r[1].index ~= nil then   -- flat: regroup by group_index, in order
    local groups, by = {}, {}
    for _, s in ipairs(r) do
      local k = s.group_index or s.index
      if not by[k] then by[k] = {}; groups[#groups + 1] = by[k] end
      table.insert(by[k], s)
    end
    r = groups
  end
  return r, metrics
end

--- The rl.rollout.new overrides the hooks make: generate_rollout, eval, custom_generate,
--- dynamic_filter, sample_filter, all_samples_process.
function M.rollout_overrides(hooks, opt)
  local o = {}
  local now = require("rl._core").loop.now
  local rollout_fn = hooks.rollout_function_path
  if rollout_fn then
    o.generate_rollout = function(ro, rollout_id)
      local t0 = now()
      local r, metrics = rollout_fn(opt, rollout_id, ro.data, false, ro)
      local groups, m2 = as_groups(r, flag("rollout_function_path"))
      ro.last_rollout_time = now() - t0
      return groups, metrics or m2 or {}
    end
  end
  local eval_fn = hooks.eval_function_path or rollout_fn
  if eval_fn then
    o.eval = function(ro, rollout_id, datasets)
      local r, metrics = eval_fn(opt, rollout_id, datasets or ro.eval_datasets, true, ro)
      if type(r) == "table" and r.data and r.metrics ~= nil then r, metrics = r.data, r.metrics end
      if type(r) ~= "table" then
        error(flag(hooks.eval_function_path and "eval_function_path" or "rollout_function_path")
          .. " (evaluation) returned " .. type(r) .. " (expected {NAME = {rewards, truncated, samples}})", 0)
      end
      for name, res in pairs(r) do
        res.truncated = res.truncated or {}
        res.rewards = res.rewards or {}
        if not res.n_samples_per_prompt then
          for _, d in ipairs(datasets or {}) do
            if d.name == name then res.n_samples_per_prompt = d.n_samples_per_eval_prompt end
          end
        end
      end
      local _, m = ro:finish_eval(rollout_id, r)
      for k, v in pairs(metrics or {}) do m[k] = v end
      return r, m
    end
  end
  if hooks.custom_generate_function_path then
    local gen = hooks.custom_generate_function_path
    o.custom_generate = function(ro, sample, params, evaluation) return gen(opt, sample, params, evaluation, ro) end
  end
  if hooks.dynamic_sampling_filter_path then
    local f = hooks.dynamic_sampling_filter_path
    o.dynamic_filter = function(_, group) return f(opt, group) end
  end
  if hooks.rollout_sample_filter_path then
    local f = hooks.rollout_sample_filter_path
    o.sample_filter = function(_, groups) return f(opt, groups) end
  end
  if hooks.rollout_all_samples_process_path then
    local f = hooks.rollout_all_samples_process_path
    o.all_samples_process = function(_, groups, ds) return f(opt, groups, ds) end
  end
  return o
end

--- --data-source-path: the source the hook returns, checked for get_samples.
function M.data_source(hooks, opt, tokenizer)
  local make = hooks.data_source_path
  if not make then return nil end
  local ds = make(opt, tokenizer)
  if type(ds) ~= "table" or type(ds.get_samples) ~= "function" then
    usage("data_source_path", opt.data_source_path, ("returned %s, not a source with get_samples(n_prompts, "
      .. "n_samples_per_prompt) (an rl.data source, or a table of those methods)"):format(type(ds)))
  end
  return ds
end

return M
