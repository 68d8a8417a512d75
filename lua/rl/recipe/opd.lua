--- rl.recipe.opd: slime's on-policy distillation (--use-opd). A frozen teacher scores every
--- token the student sampled (sample.teacher_log_probs); the trainer subtracts
--- --opd-kl-coef × (student log-prob − teacher log-prob) from each token's advantage, the
--- sample estimate of the reverse KL (train/opd_reverse_kl). Two teachers, slime's types:
---   --opd-type megatron --opd-teacher-load DIR: the teacher model in the trainer's process
---     (a frozen rl.trainer: the student's batched kernels), scoring each batch before it trains;
---   --opd-type sglang --opd-teacher-url URL (or --opd-teacher-group NAME, a frozen group of
---     --sglang-config): an engine server scores each sample as it finishes (SGLang's prompt
---     log-probs: /generate with logprob_start_len and max_new_tokens 0).
--- Teacher and student must share the tokenizer (checked at the start).
local rl = require "rl"
local log = require "rl.log"
local task = require "rl.task"

local M = {}
local Teacher = {}
Teacher.__index = Teacher

local function usage(msg) require("rl.args").usage_error(msg) end

--- The flags' checks (before anything starts).
function M.check_options(opt)
  if not opt.use_opd then
    for _, k in ipairs { "opd_type", "opd_teacher_load", "opd_teacher_url", "opd_teacher_group" } do
      if opt[k] then usage(("--%s is for on-policy distillation: add --use-opd"):format(k:gsub("_", "-"))) end
    end
    return
  end
  if not opt.opd_type then usage("--use-opd needs --opd-type megatron (--opd-teacher-load DIR) or sglang "
    .. "(--opd-teacher-url URL or --opd-teacher-group NAME)") end
  if opt.opd_type == "megatron" then
    if not opt.opd_teacher_load then usage("--opd-type megatron needs --opd-teacher-load (the teacher's model directory)") end
    if opt.opd_teacher_url or opt.opd_teacher_group then
      usage("--opd-type megatron loads the teacher from --opd-teacher-load; --opd-teacher-url/--opd-teacher-group "
        .. "are for --opd-type sglang")
    end
  else
    if opt.opd_teacher_load then usage("--opd-teacher-load is for --opd-type megatron; --opd-type sglang scores "
      .. "with an engine (--opd-teacher-url or --opd-teacher-group)") end
    if (opt.opd_teacher_url ~= nil) == (opt.opd_teacher_group ~= nil) then
      usage("--opd-type sglang needs one of --opd-teacher-url URL (an engine or router serving the teacher) and "
        .. "--opd-teacher-group NAME (a frozen group of --sglang-config)")
    end
  end
end

-- The tokenizer files of a model directory, for the same-tokenizer check.
local function tokenizer_text(dir)
  return require("rl._fs").read_file(dir .. "/tokenizer.json")
end

--- The teacher of a job (nil without --use-opd). Loads the model (megatron) or finds the
--- engine (sglang); a teacher whose tokenizer is not the student's is a usage error.
function M.new(opt, job)
  if not opt.use_opd then return nil end
  local self = setmetatable({ type = opt.opd_type, coef = opt.opd_kl_coef, scored = 0, seconds = 0 }, Teacher)
  if self.type == "megatron" then
    local dir = opt.opd_teacher_load:gsub("/+$", "")
    local mine, theirs = tokenizer_text(job.model_dir), tokenizer_text(dir)
    if not theirs then usage("--opd-teacher-load " .. dir .. ": no tokenizer.json (a Hugging Face model directory?)") end
    if mine and theirs ~= mine then
      usage(("--opd-teacher-load %s: its tokenizer is not the student's (%s): the teacher must score the student's "
        .. "token ids (hint: a teacher of the same family)"):format(dir, job.model_dir))
    end
    -- a trainer never stepped: the student's batched, exact log-prob kernels, on its device
    local ok, tr = pcall(rl.trainer.new, { model = dir, micro_batch_size = opt.micro_batch_size,
                                           max_tokens_per_gpu = opt.max_tokens_per_gpu, device = job.placement.trainer,
                                           rollout_temperature = 1.0 })
    if not ok then usage("--opd-teacher-load " .. dir .. ": " .. tostring(tr)) end
    self.trainer, self.dir = tr, dir
    log.info("on-policy distillation: teacher %s (%.1fM parameters) in the trainer's process, --opd-kl-coef %g",
      dir, tr.model:num_parameters() / 1e6, self.coef)
  else
    local url = opt.opd_teacher_url
    if opt.opd_teacher_group then
      local g = job.groups and job.groups[opt.opd_teacher_group]
      if not g then usage(("--opd-teacher-group %s: no such group in --sglang-config"):format(opt.opd_teacher_group)) end
      if g.update_weights then
        usage(("--opd-teacher-group %s takes the trainer's weights: a teacher is frozen (update_weights: false)")
          :format(opt.opd_teacher_group))
      end
      url = g.url
    end
    self.url = tostring(url):gsub("/+$", "")
    if opt.opd_teacher_group then
      self.engine = rl.engine.attach(self.url)   -- the group's router
    else   -- an engine started elsewhere: serving, and speaking SGLang's /generate
      local e, err = require("rl.recipe.external").connect(self.url, opt.rollout_health_check_timeout)
      if not e then usage("--opd-teacher-url: " .. err) end
      if e.backend ~= "native" then
        usage(("--opd-teacher-url %s is a %s server; the teacher's scores need SGLang's /generate with "
          .. "logprob_start_len (rlhost's engine, SGLang)"):format(self.url, e.backend))
      end
      self.engine = e
    end
    self.semaphore = task.semaphore(64)
    log.info("on-policy distillation: teacher at %s (SGLang prompt log-probs), --opd-kl-coef %g", self.url, self.coef)
  end
  return self
end


-- One sample through the engine: SGLang's input_token_logprobs from the prompt's last token
-- (whose entry SGLang leaves null, whatever the start) on; the response's are the last ones.
function Teacher:score_remote(s)
  local prompt_len = #s.tokens - s.response_length
  local out, err = self.engine:generate { input_ids = s.tokens, return_logprob = true, logprob_start_len = prompt_len - 1,
                                          sampling_params = { max_new_tokens = 0, temperature = 1 } }
  if not out then error("--use-opd: the teacher at " .. self.url .. ": " .. tostring(err), 0) end
  if type(out) == "table" and out[1] ~= nil then out = out[1] end
  local items = type(out) == "table" and out.meta_info and out.meta_info.input_token_logprobs
  if type(items) ~= "table" or #items < s.response_length then
    error(("--use-opd: the teacher at %s returned %s input log-probs for %d response tokens"):format(self.url,
      type(items) == "table" and #items or "no", s.response_length), 0)
  end
  local lps = {}
  for j = 1, s.response_length do
    local v = items[#items - s.response_length + j][1]
    if type(v) ~= "number" then error("--use-opd: the teacher returned no log-prob for response token " .. j, 0) end
    lps[j] = v
  end
  return lps
end

--- Fills sample.teacher_log_probs (one per response token) of every sample that lacks
--- them; the teacher's time goes to perf/opd_teacher_time.
function Teacher:score(samples)
  local t0 = require("rl._core").loop.now()
  local todo = {}
  for _, s in ipairs(samples) do
    if type(s.teacher_log_probs) ~= "table" and (s.response_length or 0) > 0 then todo[#todo + 1] = s end
  end
  if self.trainer and #todo > 0 then   -- one batched pass over the samples' tokens
    local b = { tokens = {}, response_lengths = {}, rewards = {}, loss_masks = {} }
    for i, s in ipairs(todo) do
      b.tokens[i], b.response_lengths[i], b.rewards[i], b.loss_masks[i] = s.tokens, s.response_length, 0, {}
      for j = 1, s.response_length do b.loss_masks[i][j] = 1 end
    end
    local lps = self.trainer:logprobs(b)
    for i, s in ipairs(todo) do s.teacher_log_probs = lps[i] end
  elseif not self.trainer then
    local tasks = {}
    for i, s in ipairs(todo) do
      tasks[i] = task.spawn_named("opd teacher", function()
        self.semaphore:acquire()
        local ok, r = pcall(self.score_remote, self, s)
        self.semaphore:release()
        if not ok then error(r, 0) end
        s.teacher_log_probs = r
      end)
    end
    for _, t in ipairs(tasks) do t:wait() end
  end
  self.scored = self.scored + #todo
  self.seconds = require("rl._core").loop.now() - t0
  return #todo
end

return M
