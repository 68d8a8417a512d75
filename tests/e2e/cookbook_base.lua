-- The base model of tests/e2e/test_tinker_cookbook.py: the default model after a few
-- full fine-tuning steps on chats the cookbook's role_colon renderer wrote (token ids in
-- DATA, one {"tokens": [...], "mask": [...]} a line: the mask covers the last #mask tokens). The default
-- model never saw "User:", "\boxed{" and the like, so their unembedding rows are
-- untrained, and a LoRA adapter, which rlhost does not put on the unembedding, learns
-- them only slowly; a base model that has met the format is what a real base model is.
--
--   rlhost --no-control tests/e2e/cookbook_base.lua SRC OUT DATA STEPS
local src, out, data, steps = rl.argv[1], rl.argv[2], rl.argv[3], tonumber(rl.argv[4] or "")
if not (src and out and data and steps) then
  io.stderr:write("usage: cookbook_base.lua SRC_MODEL OUT_DIR DATA.jsonl STEPS\n")
  rl.exit(2)
end
local seqs = {}
for line in io.lines(data) do
  if line:find("%S") then seqs[#seqs + 1] = rl.json.decode(line) end
end
local batch_size = 32
rl.torch.manual_seed(1)
local tr = rl.trainer.new {
  model = src, loss = { loss_type = "sft_loss" }, micro_batch_size = batch_size,
  optimizer = { lr = 3e-3, min_lr = 3e-4, lr_decay_style = "cosine", lr_decay_iters = steps, lr_warmup_iters = 5,
                weight_decay = 0.01, clip_grad = 1.0, adam_beta2 = 0.98 },
}
local t0 = rl.now()
for step = 1, steps do
  local b = { tokens = {}, response_lengths = {}, rewards = {}, loss_masks = {} }
  for i = 1, batch_size do
    local s = seqs[((step - 1) * batch_size + i - 1) % #seqs + 1]
    b.tokens[i], b.response_lengths[i], b.rewards[i], b.loss_masks[i] = s.tokens, #s.mask, 0, s.mask
  end
  local m = assert(tr:train(b))
  if step == 1 or step % 10 == 0 or step == steps then
    print(("step %d  loss %.4f  %.0f s"):format(step, m["train/loss"], rl.now() - t0))
  end
end
assert(tr:save_model(out))
for _, f in ipairs { "tokenizer.json", "tokenizer_config.json" } do
  local r = assert(io.open(src .. "/" .. f, "rb"))
  local w = assert(io.open(out .. "/" .. f, "wb"))
  w:write(r:read("*a"))
  r:close()
  w:close()
end
