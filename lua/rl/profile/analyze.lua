--- rl.profile.analyze: what a trace spent its time on.
--
-- A trace with GPU activity (cat kernel / gpu_memcpy / gpu_memset) is analysed
-- on the device: busy = the union of those intervals. A CPU-only trace (the
-- native engine on CPU) is analysed on cpu_op events instead. Op times are
-- self times (a child op's time is not counted again in its parent).
local M = {}

local DEVICE = { kernel = true, gpu_memcpy = true, gpu_memset = true }
-- What the host was doing during a device gap: these are the candidate causes.
local CAUSES = { cpu_op = true, user_annotation = true, gpu_user_annotation = true, cuda_runtime = true,
                 cuda_driver = true, python_function = true }

-- Ordered: the first category whose patterns match the (lower-case) name wins.
local CATEGORIES = {
  { "communication", { "nccl", "all_reduce", "allreduce", "all_gather", "allgather", "reduce_scatter", "all_to_all",
                       "alltoall", "deep_ep", "deepep", "gloo", "c10d::", "broadcast", "custom_ar" } },
  { "norm", { "norm", "rms", "layer_norm", "layernorm" } },  -- before attention: "flashinfer::norm::..." is a norm
  { "attention", { "flash", "fmha", "attention", "attn", "sdpa", "scaled_dot_product", "mla", "paged", "decode_kernel",
                   "prefill_kernel", "mqa" } },
  { "moe", { "moe", "topk_softmax", "expert", "grouped_topk", "fused_topk" } },
  { "quantization", { "quant", "fp8", "int8", "fp4", "scaled_mm" } },
  { "gemm", { "gemm", "cutlass", "cublas", "nvjet", "matmul", "xmma", "addmm", "aten::mm", "aten::bmm", "aten::linear", "aten::matmul",
              "sm90_", "sm80_", "ampere_", "hopper", "deepgemm", "wgmma", "onednn", "mkldnn", "dnnl" } },
  { "embedding/rope", { "embedding", "rotary", "rope", "pos_encoding" } },
  { "sampling", { "sample", "sampling", "multinomial", "argmax", "top_k", "top_p", "topk", "softmax", "log_softmax" } },
  { "memory", { "memcpy", "memset", "copy_", "_to_copy", "aten::to", "as_strided", "aten::expand", "squeeze",
                "aten::detach", "aten::unbind", "aten::narrow", "aten::split", "aten::chunk", "empty_strided", "resize_",
                "aten::clone", "aten::contiguous", "aten::cat", "concat", "gather",
                "scatter", "index", "aten::empty", "aten::zeros", "aten::fill_", "aten::slice", "aten::view", "aten::select",
                "reshape", "transpose", "permute", "aten::stack" } },
  { "elementwise", { "elementwise", "vectorized", "silu", "gelu", "act_and_mul", "aten::add", "aten::mul", "aten::sub",
                     "aten::div", "aten::exp", "aten::neg", "aten::pow", "aten::rsqrt", "aten::sigmoid", "aten::where",
                     "aten::masked", "unrolled", "reduce", "aten::sum", "aten::mean", "aten::max" } },
  { "triton/fused", { "triton", "fused" } },
  { "runtime", { "cudalaunch", "cudagraphlaunch", "cudastream", "cudaevent", "cudamemcpy", "cudadevicesynchronize" } },
}

--- The category of an op or kernel name (see CATEGORIES; "other" when none matches).
function M.classify(name, cat)
  if cat == "gpu_memcpy" or cat == "gpu_memset" then return "memory" end
  local n = tostring(name):lower()
  for _, c in ipairs(CATEGORIES) do
    for _, p in ipairs(c[2]) do
      if n:find(p, 1, true) then return c[1] end
    end
  end
  return "other"
end

-- Complete events ("X", and "B"/"E" pairs) as {s, e, name, cat, tid, pid}.
local function intervals(events)
  local out, open = {}, {}
  for _, ev in ipairs(events) do
    if type(ev) == "table" then
      local ph, ts = ev.ph, tonumber(ev.ts)
      if ts then
        local cat = type(ev.cat) == "string" and ev.cat:lower() or ""
        local name = ev.name ~= nil and tostring(ev.name) or "?"
        if ph == "X" then
          local dur = tonumber(ev.dur) or 0
          out[#out + 1] = { s = ts, e = ts + dur, name = name, cat = cat, tid = ev.tid, pid = ev.pid }
        elseif ph == "B" then
          local k = tostring(ev.pid) .. "/" .. tostring(ev.tid)
          open[k] = open[k] or {}
          table.insert(open[k], { s = ts, name = name, cat = cat, tid = ev.tid, pid = ev.pid })
        elseif ph == "E" then
          local st = open[tostring(ev.pid) .. "/" .. tostring(ev.tid)]
          local b = st and table.remove(st)
          if b then b.e = ts; out[#out + 1] = b end
        end
      end
    end
  end
  return out
end

local function by_start(a, b)
  if a.s ~= b.s then return a.s < b.s end
  return a.e > b.e  -- the enclosing one first
end

-- Self time of each interval: its duration minus its direct children's, per thread.
local function self_times(list)
  local threads = {}
  for _, iv in ipairs(list) do
    local k = tostring(iv.pid) .. "/" .. tostring(iv.tid)
    threads[k] = threads[k] or {}
    table.insert(threads[k], iv)
    iv.self = iv.e - iv.s
  end
  for _, t in pairs(threads) do
    table.sort(t, by_start)
    local stack = {}
    for _, iv in ipairs(t) do
      while #stack > 0 and stack[#stack].e <= iv.s do stack[#stack] = nil end
      local parent = stack[#stack]
      if parent and iv.e <= parent.e then parent.self = parent.self - (iv.e - iv.s) end
      stack[#stack + 1] = iv
    end
  end
end

-- Merged busy intervals of a list (sorted copy), and their total.
local function union(list)
  local sorted = {}
  for i, iv in ipairs(list) do sorted[i] = iv end
  table.sort(sorted, by_start)
  local merged, total = {}, 0
  for _, iv in ipairs(sorted) do
    local last = merged[#merged]
    if last and iv.s <= last.e then
      if iv.e > last.e then last.e = iv.e end
    else
      merged[#merged + 1] = { s = iv.s, e = iv.e }
    end
  end
  for _, m in ipairs(merged) do total = total + (m.e - m.s) end
  return merged, total
end

-- The cause event overlapping [s, e] the most; of equal overlaps the shortest, the
-- most specific (with Python stacks every frame from the thread's bootstrap down to
-- the one that waited covers the gap: the innermost one says what it waited on).
local function best_overlap(causes, s, e)
  local best, best_ov = nil, 0
  for _, c in ipairs(causes) do
    if c.s >= e then break end
    local ov = math.min(e, c.e) - math.max(s, c.s)
    if ov > best_ov + 1e-6 or (best and ov > best_ov - 1e-6 and c.e - c.s < best.e - best.s) then
      best, best_ov = c, ov
    end
  end
  return best, best_ov
end

-- Engine steps: vLLM's worker annotates each step as
-- execute_context_<reqs>(<tokens>)_generation_<reqs>(<tokens>) (or, with
-- detailed_trace_annotation, execute_<tokens>_context_<reqs>(sq<tokens>...)_generation_<reqs>(sq<tokens>...)).
-- Returns {kind = "prefill"|"decode", dur, tokens} or nil.
function M.step_of(name)
  if name:sub(1, 8) ~= "execute_" then return nil end
  local cr, ct, gr, gt = name:match("^execute_context_(%d+)%((%d+)%)_generation_(%d+)%((%d+)%)")
  if not cr then cr, ct, gr, gt = name:match("^execute_%d+_context_(%d+)%(sq(%d+).-%)_generation_(%d+)%(sq(%d+)") end
  if not cr then return nil end
  return { kind = tonumber(cr) > 0 and "prefill" or "decode", tokens = tonumber(ct) + tonumber(gt),
           requests = tonumber(cr) + tonumber(gr) }
end

local function percentile(sorted, q)
  if #sorted == 0 then return 0 end
  return sorted[math.max(1, math.ceil(q * #sorted))]
end

-- Step times by kind (prefill: a step with new prompts; decode: only running ones).
-- A GPU trace carries each annotation on the host and on the device: the host ones
-- (user_annotation) count, the device copies only when there are no host ones.
local function step_stats(all)
  local function collect(cat)
    local by, n = {}, 0
    for _, iv in ipairs(all) do
      local st = iv.cat == cat and M.step_of(iv.name)
      if st then
        local k = by[st.kind] or { durs = {}, tokens = 0, requests = 0 }
        by[st.kind] = k
        k.durs[#k.durs + 1] = iv.e - iv.s
        k.tokens, k.requests, n = k.tokens + st.tokens, k.requests + st.requests, n + 1
      end
    end
    return by, n
  end
  local by, n = collect("user_annotation")
  if n == 0 then by = collect("gpu_user_annotation") end
  local out = {}
  for _, kind in ipairs { "prefill", "decode" } do
    local k = by[kind]
    if k then
      table.sort(k.durs)
      local total = 0
      for _, d in ipairs(k.durs) do total = total + d end
      out[#out + 1] = { kind = kind, count = #k.durs, total = total, mean = total / #k.durs,
                        p50 = percentile(k.durs, 0.5), p90 = percentile(k.durs, 0.9), max = k.durs[#k.durs],
                        tokens = k.tokens, mean_batch = k.requests / #k.durs }
    end
  end
  return out
end

local function sorted_desc(t, key)
  local out = {}
  for _, v in pairs(t) do out[#out + 1] = v end
  table.sort(out, function(a, b)
    if a[key] ~= b[key] then return a[key] > b[key] end
    return a.name < b.name
  end)
  return out
end

--- Analyses one loaded trace (rl.profile.load). opts: top_n (20), gaps (15).
--- Returns {mode, events, ops, span, busy, idle, util, categories, top_ops,
--- gaps, lanes, steps} (times in microseconds; steps: per kind of engine step, when
--- the trace annotates steps as vLLM does), or nil, err when the trace holds no
--- timed op at all.
function M.analyze(trace, opts)
  opts = opts or {}
  local top_n, n_gaps = opts.top_n or 20, opts.gaps or 15
  local all = intervals(trace.events)
  local device, cpu, causes = {}, {}, {}
  for _, iv in ipairs(all) do
    if DEVICE[iv.cat] then device[#device + 1] = iv
    elseif iv.cat == "cpu_op" then cpu[#cpu + 1] = iv end
    if CAUSES[iv.cat] then causes[#causes + 1] = iv end
  end
  local mode, ops = "gpu", device
  if #device == 0 then mode, ops = "cpu", cpu end
  if #ops == 0 then
    return nil, ("%s: no kernel or cpu_op events among %d events (hint: was anything running while profiling?"
      .. " send requests between start and stop)"):format(tostring(trace.path), #trace.events)
  end
  if mode == "cpu" then
    -- a cpu_op cannot explain a gap in cpu_op activity: look at the rest
    causes = {}
    for _, iv in ipairs(all) do
      if CAUSES[iv.cat] and iv.cat ~= "cpu_op" then causes[#causes + 1] = iv end
    end
  end
  self_times(ops)
  local merged, busy = union(ops)
  local span = merged[#merged].e - merged[1].s

  local cats, names, self_total = {}, {}, 0
  for _, iv in ipairs(ops) do
    local c = M.classify(iv.name, iv.cat)
    local ce = cats[c] or { name = c, count = 0, time = 0 }
    cats[c] = ce
    ce.count, ce.time = ce.count + 1, ce.time + iv.self
    local ne = names[iv.name] or { name = iv.name, category = c, count = 0, time = 0 }
    names[iv.name] = ne
    ne.count, ne.time = ne.count + 1, ne.time + iv.self
    self_total = self_total + iv.self
  end
  local top = sorted_desc(names, "time")
  for i = top_n + 1, #top do top[i] = nil end

  table.sort(causes, by_start)
  local gaps = {}
  for i = 2, #merged do
    gaps[#gaps + 1] = { s = merged[i - 1].e, e = merged[i].s, len = merged[i].s - merged[i - 1].e }
  end
  table.sort(gaps, function(a, b) return a.len > b.len end)
  for i = n_gaps + 1, #gaps do gaps[i] = nil end
  for _, g in ipairs(gaps) do
    local c, ov = best_overlap(causes, g.s, g.e)
    if c then g.cause, g.cause_cat, g.overlap = c.name, c.cat, ov end
    g.offset = g.s - merged[1].s
  end

  local lanes = {}
  for _, iv in ipairs(ops) do
    local k = tostring(iv.tid)
    lanes[k] = lanes[k] or { name = k, list = {} }
    table.insert(lanes[k].list, iv)
  end
  local lane_list = {}
  for _, l in pairs(lanes) do
    local _, b = union(l.list)
    lane_list[#lane_list + 1] = { name = l.name, events = #l.list, busy = b, util = span > 0 and b / span or 0 }
  end
  table.sort(lane_list, function(a, b) return a.busy > b.busy end)

  return {
    path = trace.path, rank = trace.rank, mode = mode, events = #trace.events, ops = #ops,
    span = span, busy = busy, idle = span - busy, util = span > 0 and busy / span or 0,
    self_total = self_total, categories = sorted_desc(cats, "time"), top_ops = top, gaps = gaps, lanes = lane_list,
    steps = step_stats(all),
  }
end

return M
