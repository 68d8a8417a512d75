--- rl.data: prompt data sources (slime's RolloutDataSource).
--
--   local ds = rl.data.load("gsm8k/train.jsonl", { input_key = "question", label_key = "answer",
--                                                 shuffle = true, seed = 42 })
--   local groups = ds:get_samples(8, 4)   -- 8 prompts x 4 samples each: {{s, s, s, s}, ...}
--   local st = ds:state()                 -- exact position; ds:load_state(st) resumes it
--
-- Files: .jsonl (one object per line, blank lines skipped), .json (an array of
-- objects) or .parquet (one row a prompt, read with Apache Arrow row group by row group,
-- only the columns named by the keys below; nested columns become tables as JSON would:
-- struct -> object, list -> array, null -> rl.json.null), optionally sliced as
-- "path@[start:end]" (Python slice bounds).
-- Options (slime's flag in brackets):
--   input_key ("input") [--input-key]: the prompt: a string, or a list of chat messages
--   label_key (nil) [--label-key], metadata_key ("metadata") [--metadata-key],
--   tool_key ("tools") [--tool-key]: tool schemas (a list or JSON text) -> metadata.tools
--   apply_chat_template (false) [--apply-chat-template] with tokenizer (an rl.tokenizer)
--     and chat_template_kwargs ({}) [--apply-chat-template-kwargs]: the prompt becomes the
--     rendered text with the generation prompt; a string prompt is one user message
--   max_prompt_len (nil) [--rollout-max-prompt-len]: drop longer prompts (needs tokenizer)
--   shuffle (false) [--rollout-shuffle], seed (42) [--rollout-seed]: each epoch's order is
--     Python's random.Random(seed + epoch).shuffle, so it matches slime's for the same seed
--   skip_bad_rows (false): a row that is not JSON or lacks input_key is an error naming
--     file:line; true skips it and counts it in ds.skipped (logged once)
local json = require "rl.json"
local sample = require "rl.sample"
local pyrandom = require "rl.pyrandom"

local M = {}
local Source = {}
Source.__index = Source

local function fail(msg, hint)
  error(msg .. (hint and (" (hint: " .. hint .. ")") or ""), 0)
end

-- "path@[a:b]" -> path, a, b (nil bounds are open).
local function parse_slice(spec)
  local path, a, b = spec:match("^(.-)@%[(%-?%d*):(%-?%d*)%]$")
  if not path then return spec end
  return path, tonumber(a), tonumber(b)
end

local PARQUET_HINT = "check it with: python3 -c \"import pyarrow.parquet as pq; print(pq.read_table('%s'))\""
local SUPPORT_HINT = "run scripts/bootstrap.sh (it installs pyarrow, whose wheel ships Arrow C++), reconfigure and "
  .. "rebuild; or convert the file: pandas.read_parquet(path).to_json(out, orient='records', lines=True)"

-- The Parquet module (librlhost_parquet.so), loaded on the first .parquet file.
local function parquet_module(path)
  local ok, mod = pcall(require, "rlhost_parquet")
  if ok then return mod end
  local why = tostring(mod)
  if why:find("module 'rlhost_parquet' not found", 1, true) then
    fail("rl.data.load: " .. path .. ": this rlhost was built without the Parquet reader "
      .. "(Apache Arrow C++ was not found when it was configured)", SUPPORT_HINT)
  end
  fail("rl.data.load: " .. path .. ": cannot load the Parquet reader (" .. why:match("[^\n]*") .. ")", SUPPORT_HINT)
end

-- Rows of a .parquet file: only the columns the keys name (input and label must exist).
local function read_parquet(path, opts)
  local r, err = parquet_module(path).open(path)
  if not r then
    fail("rl.data.load: " .. path .. ": " .. err, not err:match("^cannot open") and PARQUET_HINT:format(path) or nil)
  end
  local kinds, names = {}, {}
  for _, c in ipairs(r:columns()) do kinds[c.name], names[#names + 1] = c, c.name end
  local want, seen = {}, {}
  local function need(key, flag, required)
    if not key or seen[key] then return end
    local c = kinds[key]
    if not c then
      if required then
        fail(("rl.data.load: %s: no column '%s' (columns: %s)"):format(path, key, table.concat(names, ", ")),
          "set " .. flag)
      end
      return
    end
    seen[key], want[#want + 1] = true, key
  end
  local input_key = opts.input_key or "input"
  need(input_key, "input_key (--input-key)", true)
  local ik = kinds[input_key]
  if ik.kind ~= "string" and ik.kind ~= "list" and ik.kind ~= "binary" then
    fail(("rl.data.load: %s: column '%s' has type %s; a prompt is text or a list of chat messages"):format(
      path, input_key, ik.type), "set input_key (--input-key) to the prompt column")
  end
  need(opts.label_key, "label_key (--label-key)", true)
  need(opts.metadata_key or "metadata", "metadata_key (--metadata-key)", false)
  need(opts.tool_key or "tools", "tool_key (--tool-key)", false)
  local ok, serr = r:select(want)
  if not ok then
    fail("rl.data.load: " .. path .. ": " .. serr, "cast the column to a supported type when writing the file")
  end
  local rows, lines = {}, {}
  while true do
    local group, gerr = r:next()
    if group == false then break end
    if not group then fail("rl.data.load: " .. path .. ": " .. gerr, PARQUET_HINT:format(path)) end
    for _, row in ipairs(group) do
      rows[#rows + 1] = row
      lines[#rows] = #rows
    end
  end
  r:close()
  return rows, lines, 0
end

local function read_rows(path, opts)
  if path:match("%.parquet$") then return read_parquet(path, opts) end
  if not (path:match("%.jsonl$") or path:match("%.json$")) then
    fail("rl.data.load: " .. path .. ": unsupported file type", "use .jsonl, .json or .parquet")
  end
  local f, err = io.open(path, "r")
  if not f then fail("rl.data.load: cannot open " .. path .. ": " .. tostring(err)) end
  local text = f:read("*a")
  f:close()
  local rows, lines, skipped = {}, {}, 0
  if path:match("%.jsonl$") then
    local n = 0
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do
      n = n + 1
      if line:match("%S") then
        local v, derr = json.decode(line)
        if type(v) ~= "table" or json.is_array(v) then
          if not opts.skip_bad_rows then
            fail(("%s:%d: not a JSON object (%s)"):format(path, n, derr or type(v)),
              "fix the row, or pass skip_bad_rows = true to skip and count such rows")
          end
          skipped = skipped + 1
        else
          rows[#rows + 1], lines[#rows + 1] = v, n
        end
      end
    end
  else
    local v, derr = json.decode(text)
    if not json.is_array(v) then fail(path .. ": expected a JSON array of objects (" .. (derr or type(v)) .. ")") end
    for i, row in ipairs(v) do rows[i], lines[i] = row, i end
  end
  return rows, lines, skipped
end

local function py_bound(i, n)
  if i == nil then return nil end
  if i < 0 then i = math.max(n + i, 0) end
  return math.min(i, n)
end

function M.load(spec, opts)
  if type(spec) ~= "string" then error("rl.data.load: bad argument #1 'path' (string expected, got " .. type(spec) .. ")", 2) end
  if opts ~= nil and type(opts) ~= "table" then
    error("rl.data.load: bad argument #2 'opts' (table expected, got " .. type(opts) .. ")", 2)
  end
  opts = opts or {}
  if opts.apply_chat_template and not opts.tokenizer then
    error("rl.data.load: apply_chat_template needs opts.tokenizer (an rl.tokenizer)", 2)
  end
  if opts.max_prompt_len and not opts.tokenizer then
    error("rl.data.load: max_prompt_len needs opts.tokenizer to count tokens", 2)
  end
  local path, a, b = parse_slice(spec)
  local rows, lines, skipped = read_rows(path, opts)
  local n = #rows
  a, b = py_bound(a, n) or 0, py_bound(b, n) or n
  local input_key = opts.input_key or "input"
  local metadata_key = opts.metadata_key or "metadata"
  local tool_key = opts.tool_key or "tools"
  local prompts, dropped = {}, 0
  for i = a + 1, b do
    local row, where = rows[i], ("%s:%d"):format(path, lines[i])
    local prompt = row[input_key]
    if prompt == nil or prompt == json.null then
      local keys = {}
      for k in pairs(row) do keys[#keys + 1] = k end
      table.sort(keys)
      if not opts.skip_bad_rows then
        fail(("%s: no '%s' field (fields: %s)"):format(where, input_key, table.concat(keys, ", ")), "set input_key (--input-key)")
      end
      skipped = skipped + 1
    else
      local metadata = row[metadata_key]
      metadata = (type(metadata) == "table" and metadata ~= json.null) and metadata or {}
      local tools = row[tool_key]
      if type(tools) == "string" then tools = json.decode(tools) end
      if type(tools) == "table" then metadata.tools = tools end
      if opts.apply_chat_template then
        local messages = type(prompt) == "string" and { { role = "user", content = prompt } } or prompt
        local kw = {}
        for k, v in pairs(opts.chat_template_kwargs or {}) do kw[k] = v end
        kw.add_generation_prompt = true
        if metadata.tools then kw.tools = metadata.tools end
        prompt = opts.tokenizer:apply_chat_template(messages, kw)
      end
      local keep = true
      if opts.max_prompt_len and type(prompt) == "string" then
        keep = #opts.tokenizer:encode(prompt, { add_special_tokens = false }) <= opts.max_prompt_len
      end
      if keep then
        local label = opts.label_key and row[opts.label_key] or nil
        if label == json.null then label = nil end
        prompts[#prompts + 1] = sample.new { prompt = prompt, label = label, metadata = metadata }
      else
        dropped = dropped + 1
      end
    end
  end
  if #prompts == 0 then fail("rl.data.load: " .. spec .. " has no usable prompts") end
  if skipped > 0 or dropped > 0 then
    require("rl.log").warn(("rl.data: %s: %d rows skipped (bad), %d prompts dropped (longer than %s tokens)"):format(
      spec, skipped, dropped, tostring(opts.max_prompt_len)))
  end
  local self = setmetatable({
    path = spec, prompts = prompts, skipped = skipped, dropped = dropped,
    shuffle = opts.shuffle or false, seed = opts.seed or 42,
    sample_offset = 0, epoch_id = 0, sample_group_index = 0, sample_index = 0, order = nil,
  }, Source)
  self:_reorder()
  return self
end

function Source:_reorder()
  local order = {}
  for i = 1, #self.prompts do order[i] = i - 1 end
  if self.shuffle then pyrandom.new(self.seed + self.epoch_id):shuffle(order) end
  self.order = order
end

function Source:size() return #self.prompts end

--- n prompts (crossing into the next epoch, reshuffled, when the data runs out),
--- each as a group of n_per_prompt fresh copies with group_index / index set.
function Source:get_samples(n, n_per_prompt)
  n_per_prompt = n_per_prompt or 1
  if type(n) ~= "number" or n < 1 or n ~= math.floor(n) then
    error("rl.data.Source:get_samples: bad argument #1 'n' (positive integer expected, got " .. tostring(n) .. ")", 2)
  end
  local groups = {}
  local buf = self.buffer
  while #groups < n and buf and #buf > 0 do groups[#groups + 1] = table.remove(buf, 1) end
  while #groups < n do
    if self.sample_offset >= #self.order then
      self.epoch_id = self.epoch_id + 1
      self.sample_offset = 0
      self:_reorder()
    end
    local base = self.prompts[self.order[self.sample_offset + 1] + 1]
    self.sample_offset = self.sample_offset + 1
    local group = {}
    for _ = 1, n_per_prompt do
      local s = base:clone()
      s.group_index = self.sample_group_index
      s.index = self.sample_index
      self.sample_index = self.sample_index + 1
      group[#group + 1] = s
    end
    self.sample_group_index = self.sample_group_index + 1
    groups[#groups + 1] = group
  end
  return groups
end

--- Puts groups back (partial rollout: aborted groups resume first at the next
--- get_samples), as slime's RolloutDataSourceWithBuffer.add_samples.
function Source:add_samples(groups)
  if type(groups) ~= "table" then
    error("rl.data.Source:add_samples: bad argument #1 'groups' (list of sample lists expected)", 2)
  end
  self.buffer = self.buffer or {}
  for i, g in ipairs(groups) do
    if type(g) ~= "table" or type(g[1]) ~= "table" then
      error(("rl.data.Source:add_samples: groups[%d] is not a list of samples"):format(i), 2)
    end
    self.buffer[#self.buffer + 1] = g
  end
end

--- The exact position (slime's global_dataset_state_dict keys), plus the
--- buffered groups (as sample dicts) when there are any.
function Source:state()
  local st = { sample_offset = self.sample_offset, epoch_id = self.epoch_id,
               sample_group_index = self.sample_group_index, sample_index = self.sample_index }
  if self.buffer and #self.buffer > 0 then
    st.buffer = {}
    for i, g in ipairs(self.buffer) do
      local dg = {}
      for j, smp in ipairs(g) do dg[j] = smp:to_dict() end
      st.buffer[i] = dg
    end
  end
  return st
end

function Source:load_state(st)
  for _, k in ipairs { "sample_offset", "epoch_id", "sample_group_index", "sample_index" } do
    if type(st[k]) ~= "number" then error("rl.data.Source:load_state: state." .. k .. " missing or not a number", 2) end
    self[k] = st[k]
  end
  self.buffer = nil
  if type(st.buffer) == "table" then
    self.buffer = {}
    for i, dg in ipairs(st.buffer) do
      local g = {}
      for j, d in ipairs(dg) do g[j] = sample.from_dict(d) end
      self.buffer[i] = g
    end
  end
  self:_reorder()
end

function Source:__tostring()
  return ("rl.data.Source(%s, %d prompts, epoch %d, offset %d)"):format(self.path, #self.prompts, self.epoch_id,
    self.sample_offset)
end

return M
