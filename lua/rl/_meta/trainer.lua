---@meta
-- LuaLS type stubs for rl.trainer (lua/rl/trainer/init.lua over librlhost_torch.so; its options are declared in
-- lua/rl/trainer/options.lua). See docs/trainer.md.

---@class rl.trainer.Batch
---@field tokens integer[][] prompt + response ids per sample
---@field response_lengths integer[]
---@field rewards number[] normalised rewards (the advantage source)
---@field loss_masks number[][] one 0/1 per response token
---@field rollout_log_probs? number[][] the engine's log-probs of the response

---@class rl.trainer.Options
---@field model string|rl.model.Model
---@field ref? string|rl.model.Model|boolean
---@field critic? string|rl.model.Model|boolean use_critic: the value model's decoder (default true: the model's checkpoint again)
---@field loss? table advantage_estimator, eps_clip, eps_clip_high, eps_clip_c, entropy_coef, use_kl_loss, kl_loss_coef, kl_loss_type, use_unbiased_kl, use_tis, tis_mode, tis_clip_low, tis_clip, calculate_per_token_loss, loss_type
---@field optimizer? table lr, min_lr, adam_beta1, adam_beta2, adam_eps, weight_decay, lr_decay_style, lr_warmup_iters, lr_decay_iters, clip_grad
---@field dtype? string
---@field global_batch_size? integer
---@field micro_batch_size? integer
---@field max_tokens_per_gpu? integer
---@field rollout_temperature? number
---@field use_rollout_logprobs? boolean
---@field old_logprobs? "auto"|"recompute"|"check" old log-probs: the rollout's where the engine's weights digest proves them the policy's own (auto), always recomputed, or recomputed and checked bit for bit
---@field kl_coef? number
---@field gamma? number
---@field normalize_advantages? boolean
---@field use_critic? boolean train a value model beside the policy (advantage_estimator "ppo" needs it)
---@field critic_lr? number the critic's learning rate (default: lr)
---@field value_clip? number the value loss clips V to V_old +- value_clip (0.2)
---@field lambd? number GAE's lambda (1.0)
---@field num_critic_only_steps? integer the first N train calls update the critic only (0)
---@field bf16? boolean mixed precision: float32 master weights, forward passes under bf16 autocast
---@field lora_rank? integer LoRA: train an adapter of this rank on the frozen model (0: off)
---@field lora_alpha? number LoRA scale numerator (16): deltas scaled by alpha / rank
---@field target_modules? string|string[] LoRA targets: "all-linear" (default), names among q_proj..down_proj and lm_head

---@class rl.trainer.Trainer
---@field model rl.model.Model
---@field ref? rl.model.Model
---@field model_dir? string where the model was loaded from (tokenizer files for checkpoints)
---@field ref_dir? string where the reference model was loaded from
---@field critic? rl.model.Model use_critic: the value model's decoder
---@field critic_dir? string where the critic's decoder was loaded from
---@field weight_version? string the last version handed to engines (tr:sync) or restored
---@field checkpoint? {path: string, iteration: integer, step: integer} the checkpoint last loaded
local Trainer = {}

---@class rl.trainer.SaveResult
---@field path string DIR/iter_<N>
---@field iteration integer
---@field files string[] file names in path
---@field seconds number

--- Optimiser steps over the batch (waits in the task) → metrics of the last step, or nil, err.
--- Raises when batch.advantage_estimator (set by rl.rollout.train_data.convert) is not the
--- loss's advantage_estimator.
---@param batch rl.trainer.Batch
---@return table<string, number>|nil
---@return string|nil err
---@param opts? {progress?: boolean|string} progress: a bar over micro-batches (a string is its label)
function Trainer:train(batch, opts) end

--- Micro-batches done and their total in the running (or last) train call; safe
--- while a train call waits in another task.
---@return integer done
---@return integer total
function Trainer:progress() end

--- Runs the trainer's work (its helper thread and the LibTorch threads it starts) on these
--- CPUs ("0-3,6"; nil: anywhere); the event loop stays where it is.
---@param list string|nil
function Trainer:set_cpus(list) end

---@param batch rl.trainer.Batch
---@return number[][]
function Trainer:logprobs(batch) end

--- use_critic: per sample, the critic's value of each response position (the state
--- before each response token). Raises without a critic.
---@param batch rl.trainer.Batch
---@return number[][]
function Trainer:values(batch) end

---@class rl.trainer.SyncOptions
---@field version? string|integer default: the step
---@field method? "auto"|"shm"|"disk"|"distributed"|"http" auto: in memory for thread-mode engines, shared memory for process-mode ones, safetensors on tmpfs otherwise
---@field timeout? number distributed, shm: seconds for every step of the sync (default 120)
---@field master_address? string distributed: the address engines reach the trainer at (127.0.0.1)
---@field master_port? integer distributed: the trainer's store port (default: a free one)
---@field backend? "gloo"|"nccl" distributed: the group's backend (gloo)
---@field tmp_dir? string disk: where the weights' directory goes (default /dev/shm, else $TMPDIR)
---@field keep_going? boolean a failed engine does not stop the others (versions[i] false, errors[i] why)
---@field guard? fun(i: integer, rx: rl.weight_sync.Receiver): (fun()|nil) around each engine's transfer (fault tolerance)

--- Weights to engines through rl.weight_sync (in memory for thread-mode engines, shared
--- memory for process-mode ones, safetensors on tmpfs otherwise, or a c10d broadcast with
--- method = "distributed"). methods[i] says how engine i got them, versions[i] the version
--- it serves. No-op on data-parallel ranks > 0.
---@param engines table|table[]|string engines, rl.weight_sync receivers or URLs
---@param opts? string|integer|rl.trainer.SyncOptions a version, or options
---@return rl.weight_sync.PushResult|nil
---@return string|nil err
function Trainer:sync(engines, opts) end

--- The trainer's weights as an rl.weight_sync source (read on its helper thread).
---@return rl.weight_sync.Source
function Trainer:weight_source() end

--- Forgets what syncs kept for the engine at `url` (its shared weight buffers): it is gone.
---@param url string
function Trainer:forget_engine(url) end

---@return integer
function Trainer:step() end

--- LoRA (lora_rank > 0): the adapter being trained, else nil.
---@return rl.model.Lora|nil
function Trainer:lora() end

--- LoRA: the trained adapter as PEFT files in dir.
---@param dir string
---@return true|nil ok
---@return string? err
function Trainer:save_lora(dir) end
---@return number
function Trainer:lr() end
---@return boolean|nil
---@return string|nil err
function Trainer:save_model(dir, opts) end

--- A checkpoint dir/iter_<N>/ (HF model + tokenizer files, optimizer.pt, trainer_state.json),
--- written atomically, then dir/latest_checkpointed_iteration.txt = N. Waits in the task.
---@param dir string the save directory (slime's --save)
---@param opts? {extra?: table, iteration?: integer} extra: JSON-able recipe state; iteration: default the step
---@return rl.trainer.SaveResult|nil
---@return string|nil err
function Trainer:save(dir, opts) end

--- Restores a checkpoint (weights, AdamW state, step, RNG) into this trainer; nothing
--- changes on failure. Waits in the task.
---@param path string a save directory (its latest iteration) or an iter_* directory
---@return table|nil extra the table given to save
---@return table|string state_or_err trainer_state.json, or the error
function Trainer:load(path) end

---@class rl.trainer
rl.trainer = {}

---@param opts rl.trainer.Options
---@return rl.trainer.Trainer
function rl.trainer.new(opts) end

--- A trainer resumed from a checkpoint (slime's --load): its model (or opts.model, same
--- shape), the saved options overridden by opts, the saved reference model (opts.ref;
--- false for none). Waits in the task.
---@param path string a save directory (its latest iteration) or an iter_* directory
---@param opts? table as rl.trainer.new's, all optional
---@return rl.trainer.Trainer|nil
---@return table|string extra_or_err the table given to save, or the error
function rl.trainer.load(path, opts) end

--- An actor_train trace event on samples[i] from stats[i] (the second result of
--- Trainer:train, e.g. gathered from data-parallel ranks).
---@param samples table[] sample objects
---@param stats table[] {advantage, loss_weight, clipped_frac, logp_mean, step} each
function rl.trainer.trace_samples(samples, stats) end
