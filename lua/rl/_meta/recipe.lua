---@meta
-- LuaLS type stubs for rl.recipe (never loaded at run time). See docs/recipes.md.

---@class rl.recipe
---@field current rl.recipe.Job|nil the job of the running recipe (for rlhost attach)
rl.recipe = {}

--- Appends slime's GRPO flags and the metrics flags to an rl.args spec.
---@param spec table
---@return table spec
function rl.recipe.options(spec) end

---@class rl.recipe.Job
---@field opt table the parsed flags, defaults filled in
---@field model_dir string
---@field default_model boolean|nil true when running on the embedded default model
---@field tokenizer rl.Tokenizer
---@field data rl.DataSource
---@field eval_datasets table[]
---@field engines rl.Engine[]|nil the policy group's engines (the ones the trainer syncs)
---@field router table|nil the policy group's router (the rollout's URL)
---@field groups rl.recipe.EngineGroup[]|nil every engine group, in order and by name (job.groups.ref.url)
---@field policy_group rl.recipe.EngineGroup|nil the group that takes weight updates
---@field engine_models table[]|nil the checked --sglang-config models (rl.recipe.engines.plan; read once)
---@field offloaded boolean|nil --offload-rollout: the engines' memory is released (training)
---@field trainer rl.Trainer
---@field rollout table the rl.rollout instance (its options are live fields)
---@field metrics rl.metrics.Logger
---@field start_rollout integer 0, or the next rollout id of a resumed checkpoint
---@field last table|nil the last step's metrics
---@field last_batch table|nil the last train batch
---@field last_samples table[]|nil the last rollout's samples
---@field last_groups table[]|nil
---@field stopping boolean|nil set by Ctrl-C / SIGTERM: the loop ends after this step (within --stop-grace)
---@field aborting string|nil why the work in flight was aborted (the grace is over, a second signal)
---@field last_completed integer|nil the last rollout step that trained (what a stop saves)
---@field last_checkpoint string|nil the last checkpoint written
---@field paused boolean|nil
---@field rank integer data-parallel rank (0 when not distributed)
---@field world_size integer data-parallel ranks (1 when not distributed)
---@field is_main boolean rank 0: engines, rollout, eval, checkpoints, metrics
---@field health rl.recipe.Health|nil the engines' health monitor under --use-fault-tolerance
---@field faults rl.recipe.Drills|nil the fault drills under --use-fault-tolerance (--fault-injection)
---@field phase string|nil the timer running now (rollout, train, sync, eval, save)
local Job = {}

--- An engine group (slime's rollout server with its server groups; --sglang-config).
---@class rl.recipe.EngineGroup
---@field name string the config's model name ("default" without a config)
---@field model_path string
---@field backend string "native", or another rl.engine backend ("vllm")
---@field update_weights boolean false: frozen (a reference or reward model), never synced
---@field offload boolean released while training under --offload-rollout
---@field engines rl.Engine[]
---@field engine_opts table[] each engine's rl.engine.start options (restarts use them)
---@field router table its own router
---@field url string the router's URL: where rewards and recipes reach this model

--- rl.recipe.engines: engine groups and offload/onload (docs/recipes.md, "Engine groups").
---@class rl.recipe.engines
local engines = {}
--- Reads and checks an --sglang-config file (YAML, JSON or Lua); usage error naming file and field.
---@param path string
---@param policy_model string the trainer's model directory
---@return table[] models
function engines.load_config(path, policy_model) end
--- Starts every group's engines and router; returns the groups (in order and by name) and the policy group.
---@return rl.recipe.EngineGroup[] groups, rl.recipe.EngineGroup|nil policy
function engines.start(opt, job, base_opts) end
--- The groups the job will start, before any starts: {name, update_weights, engines = {n = count}} each.
---@param opt table
---@param job rl.recipe.Job
---@return table[]
function engines.plan(opt, job) end
--- Asks a group through its router with an SGLang /generate request, whatever its backend
--- (a vLLM group's goes to /v1/completions); returns the SGLang-shaped answer and {worker}.
---@param g rl.recipe.EngineGroup
---@param req table text or input_ids, sampling_params, return_logprob
---@param timeout? number seconds (default 60)
---@return table|nil out, string|nil err, table|nil info
function engines.generate(g, req, timeout) end
--- Releases the offloaded groups' memory (health monitoring held) / weights back / KV back (monitoring again).
function engines.offload(job) end
function engines.onload_weights(job) end
function engines.onload_kv(job) end

--- rl.recipe.health: the engines' monitor (docs/fault_tolerance.md).
---@class rl.recipe.Health
---@field states {state: "healthy"|"suspect"|"dead"|"restarting", fails: integer, restarts: integer, why: string|nil}[]
local Health = {}
--- Stops probing (engines released, weight sync) / probes again.
function Health:pause() end
function Health:resume() end
--- A named pause that resume() does not end (--offload-rollout holds "offloaded").
---@param why string
function Health:hold(why) end
---@param why string
function Health:release(why) end
--- Engine i out of the router, killed; restarted before the next sync.
---@param i integer
---@param why string
function Health:mark_dead(i, why) end
--- The fault-tolerant weight sync (Job:sync uses it): the trainer's sync (rl.weight_sync) engine by
--- engine under a guard of probes, the dead restarted and refit first; opts.after_probes runs once
--- the probes and restarts are done (the step's sync-time fault drills).
---@param trainer rl.Trainer
---@param opts? {after_probes?: fun()}
---@return {weight_version: string, methods: string[], versions: (string|false)[], seconds: number}|nil, string|nil
function Health:sync_weights(trainer, opts) end
---@return table<string, number> rollout/engines/* metrics
function Health:metrics() end

--- rl.recipe.faults: fault drills (--fault-injection, job:inject_fault; docs/fault_tolerance.md).
---@class rl.recipe.Drills
local Drills = {}
--- SIGKILL ("kill") or SIGSTOP ("stop") to engine i of a group (default the policy's) now.
---@param action "kill"|"stop"
---@param i integer
---@param group? string an engine group's name (--sglang-config)
---@return boolean|nil ok, string|nil err
function Drills:inject(action, i, group) end

--- Model, prompts, eval sets, engines + router, trainer (or resume), sinks, rollout.
---@param opt table rl.args result of rl.recipe.options
---@param setup_opts? {reward?: function|string, dynamic_filter?: function|string, sample_hooks?: function|function[]} and rl.rollout.new overrides (dynamic_filter is off under --dynamic-sampling-filter none)
---@return rl.recipe.Job
function rl.recipe.setup(opt, setup_opts) end

--- One rollout step with a progress bar → groups, flat samples.
---@param rollout_id integer
---@return table[] groups
---@return table[] samples
function Job:rollout_step(rollout_id) end
--- A rollout generated in the background (rl.recipe.async) becomes the step's, as rollout_step's would.
---@param rollout_id integer
---@param r {groups: table[][], extra: table, seconds: number, waited: number, data_state: table|nil}
---@return table[][] groups, rl.Sample[] samples
function Job:take_rollout(rollout_id, r) end
--- A rollout started ahead of its step drew from the data in `data_state`: checkpoints written
--- before that step trains resume from there. A function(trained) -> state gives it when a
--- checkpoint is written (continuous generation: every untrained group put back); `stop`
--- stops the generation in the background when the run stops or fails; nil: none runs ahead.
---@param data_state table|fun(trained: boolean): table|nil
---@param stop fun()|nil
function Job:rollout_ahead(data_state, stop) end

--- A data-parallel rank > 0 (`rlhost --nproc N`): trains on the share rank 0
--- scatters each step until rank 0 finishes. The recipe's whole loop on that rank.
function Job:train_worker() end

--- Step 3: trains on the batch (micro-batch bar) → train metrics. With several ranks,
--- rank 0 splits the batch balanced by length and scatters it. The trainer raises when
--- batch.advantage_estimator is not its loss's.
---@param batch table
---@return table
function Job:train(batch) end

--- Step 4: the trainer's weights to the engines (nothing without engines).
---@return {seconds: number, weight_version: string, methods: string[]}|nil
function Job:sync() end

--- Logs the step's metrics (rollout/, train/, perf/ times, reload/) to the sinks.
function Job:log_step() end

--- Eval when due (step 0, every --eval-interval, final = true at the end).
---@param rollout_id integer
---@param final? boolean
---@return table|nil metrics
function Job:maybe_eval(rollout_id, final) end

--- Checkpoint when due (every --save-interval steps; force = true: now). A save that
--- fails leaves the last good checkpoint; --on-save-failure stop (default) ends the run
--- with status 1, continue trains on.
---@param rollout_id integer
---@param force? boolean
function Job:maybe_save(rollout_id, force) end

--- Runs fn(...) under a step timer (rollout, train, sync, eval, save). A stop that
--- aborts the phase ends the run here (Job:shutdown); a rollout that fails (a failure
--- budget) ends it with status 1 (Job:fail).
---@param name string
---@param fn function
---@return any ...
function Job:timed(name, fn, ...) end

--- Aborts the work in flight now (the stop grace is over, or a second signal).
---@param why string
function Job:abort_now(why) end

--- The end of a stopped run: the last completed step saved, the summary, children
--- stopped, exit 143 (SIGTERM) or 130 (Ctrl-C). Never returns.
---@param phase string|nil
---@param when "in"|"before"|"after"|nil
function Job:shutdown(phase, when) end

--- A failed step: its samples dumped, a metrics record, the last completed step saved,
--- engines stopped, then the run ends with status 1 and `err`'s message. Never returns.
---@param err any an rl.rollout.budget failure, or any error of the rollout
function Job:fail(err) end

--- A fault drill: SIGKILL ("kill") or SIGSTOP ("stop") to engine i of a group, default the
--- policy's (needs --use-fault-tolerance).
---@param action "kill"|"stop"
---@param i integer
---@param group? string an engine group's name (--sglang-config)
---@return boolean|nil ok, string|nil err
function Job:inject_fault(action, i, group) end

function Job:pause() end
function Job:resume() end
function Job:wait_while_paused() end

--- --rollout-function sleep: engines and router up and idle until Ctrl-C.
---@param interval_s? number seconds between "still here" lines (3600)
function Job:sleep(interval_s) end

--- Stops engines and router, closes sinks, prints the summary; exit 130 after Ctrl-C.
---@param last_rollout? integer
function Job:finish(last_rollout) end

--- rl.recipe.sync_check (lua/rl/recipe/sync_check.lua): slime's --check-weight-update-equal
--- by log-probs: every engine samples a response to a fixed prompt, the trainer scores it.
---@class rl.recipe.sync_check
local sync_check = {}

--- The largest |engine - trainer| log-prob over engines and tokens; raises naming the
--- engine when one is above `tolerance`.
---@param job rl.recipe.Job
---@param tolerance number
---@return number
function sync_check.run(job, tolerance) end

--- rl.recipe.async: one-step-off (slime's train_async.py) — step k+1's rollout runs while
--- step k trains; the sync waits for it (staleness 1). recipes/grpo_gsm8k_async.lua.
---@class rl.recipe.Ahead
local Ahead = {}
--- Starts the rollout of step rollout_id in the background (the engines' current weights).
---@param rollout_id integer
function Ahead:start(rollout_id) end
--- Waits for the rollout in flight (the job's timer rollout_wait); its error is raised here.
function Ahead:settle() end
--- Step rollout_id's groups (and samples), taken by the job as rollout_step's; the step's
--- metrics get async/staleness_{min,mean,max}, async/tokens_version_<v>, async/engine_idle_time.
---@param rollout_id integer
---@return table[][] groups, rl.Sample[] samples
function Ahead:take(rollout_id) end
--- After job:sync(): the engines' new version.
---@param version string|number|nil
function Ahead:synced(version) end
--- Cancels the rollout in flight (a stop between steps).
function Ahead:cancel() end
rl.recipe.async = {}
---@param job rl.recipe.Job
---@return rl.recipe.Ahead
function rl.recipe.async.one_step_off(job) end

--- rl.recipe.async.fully_async: the engines generate without pause (rl.rollout.stream); a
--- step takes its groups once enough are eligible; the sync swaps weights between decode steps.
---@class rl.recipe.FullyAsync
local Full = {}
--- Starts the engines generating for steps from rollout_id on.
---@param rollout_id integer
function Full:start(rollout_id) end
--- Step rollout_id's groups (and samples), taken by the job as rollout_step's; the step's
--- metrics get async/staleness_*, async/tokens_version_<v>, async/dropped_stale_groups,
--- async/kept_stale_groups, async/groups_held, async/engine_idle_{time,fraction},
--- async/trainer_idle_fraction, async/max_staleness.
---@param rollout_id integer
---@return table[][] groups, rl.Sample[] samples
function Full:take(rollout_id) end
--- After job:sync(): the engines' new version; the groups trained into it free their places.
---@param version string|number|nil
function Full:synced(version) end
--- Stops the generation.
function Full:stop() end
---@param job rl.recipe.Job
---@param opts {max_staleness: integer, policy: "wait"|"drop"|"keep"}
---@return rl.recipe.FullyAsync
function rl.recipe.async.fully_async(job, opts) end
