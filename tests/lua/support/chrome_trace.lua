-- A synthetic torch-profiler (kineto) Chrome trace shaped like SGLang's decode
-- traces: kernels on a CUDA stream, gpu_memcpy, cpu_op / cuda_runtime /
-- user_annotation on the host, metadata events, deviceProperties and
-- distributedInfo. Times are exact so specs can assert the analysis.
--
--   local gen = dofile(spec_dir .. "/support/chrome_trace.lua")
--   local doc = gen.trace { rank = 0, steps = 5, extra_gap = 500 }
--
-- Per step (1000 us apart, t0 = step start), on the device:
--   memcpy [0,20) gemm [20,420) attention [420,620) norm [620,670)
--   elementwise [670,720) all-reduce [720,820), then idle until the next step.
-- Busy 820 us per step. After step 3 the next step starts `extra_gap` us later;
-- a cpu_op "sampler::sample" covers that gap; "scheduler: recv_requests" (a
-- user_annotation) covers the last 150 us before every step.
local M = {}

M.KERNELS = {
  { 0, 20, "Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", "memory" },
  { 20, 420, "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", "kernel", "gemm" },
  { 420, 620, "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64>>", "kernel", "attention" },
  { 620, 670, "void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>", "kernel", "norm" },
  { 670, 720, "void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel>", "kernel", "elementwise" },
  { 720, 820, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "kernel", "communication" },
}
M.STEP, M.BUSY = 1000, 820

function M.trace(opts)
  opts = opts or {}
  local rank, steps, extra = opts.rank or 0, opts.steps or 5, opts.extra_gap or 500
  local base = 1700000000000000 + rank * 17  -- µs since the epoch, as kineto writes
  local ev = {
    { ph = "M", name = "process_name", pid = 0, tid = 0, args = { name = "GPU " .. rank } },
    { ph = "M", name = "process_name", pid = 4242, tid = 0, args = { name = "python3" } },
    { ph = "M", name = "thread_name", pid = 4242, tid = 4243, args = { name = "scheduler" } },
  }
  local function add(t) ev[#ev + 1] = t end
  local t0 = base
  for i = 1, steps do
    add { ph = "X", cat = "user_annotation", name = "forward_batch", pid = 4242, tid = 4243, ts = t0, dur = 800 }
    for _, k in ipairs(M.KERNELS) do
      add { ph = "X", cat = "cpu_op", name = "aten::launch_" .. k[5], pid = 4242, tid = 4243, ts = t0 + k[1] / 10, dur = 30 }
      add { ph = "X", cat = "cuda_runtime", name = "cudaLaunchKernel", pid = 4242, tid = 4243, ts = t0 + k[1] / 10 + 5, dur = 10,
            args = { correlation = i * 100 + _ } }
      add { ph = "X", cat = k[4], name = k[3], pid = 0, tid = 7, ts = t0 + k[1], dur = k[2] - k[1],
            args = { stream = 7, device = 0, correlation = i * 100 + _ } }
      add { ph = "f", id = i * 100 + _, pid = 0, tid = 7, ts = t0 + k[1], cat = "ac2g", name = "ac2g", bp = "e" }
    end
    local next_t0 = t0 + M.STEP + (i == 3 and extra or 0)
    if i == 3 then
      add { ph = "X", cat = "cpu_op", name = "sampler::sample", pid = 4242, tid = 4243, ts = t0 + M.BUSY, dur = next_t0 - t0 - M.BUSY }
    end
    if i < steps then
      add { ph = "X", cat = "user_annotation", name = "scheduler: recv_requests", pid = 4242, tid = 4243, ts = next_t0 - 150, dur = 150 }
    end
    t0 = next_t0
  end
  add { ph = "i", s = "t", name = "Iteration Start: PyTorch Profiler", pid = 4242, tid = 4243, ts = base }
  return {
    schemaVersion = 1,
    deviceProperties = { { id = 0, name = "NVIDIA H100 80GB HBM3", totalGlobalMem = 85029158912, computeMajor = 9 } },
    distributedInfo = { backend = "nccl", rank = rank, world_size = opts.world_size or 2 },
    cuda_runtime_version = 12080,
    traceEvents = ev,
    displayTimeUnit = "ms",
  }
end

-- Expected numbers for a trace with these options.
function M.expected(opts)
  local steps, extra = opts.steps or 5, opts.extra_gap or 500
  local busy = steps * M.BUSY
  local span = (steps - 1) * M.STEP + extra + M.BUSY
  return { busy = busy, span = span, util = busy / span, biggest_gap = M.STEP - M.BUSY + extra }
end

return M
