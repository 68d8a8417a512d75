#!/usr/bin/env bash
# Decode tokens/s on one GPU, one run: rlhost's engine (CUDA graphs per batch bucket,
# bench/gpu/decode.lua), a plain PyTorch decode loop captured in a CUDA graph, and
# transformers' generate() (bench/gpu/decode_torch.py), same model directory, bf16,
# PROMPT-token prompts, NEW new tokens, greedy, at each batch size. Prints a table with
# the ratios, % of the HBM roofline (weights + the KV cache read once per step, at the
# copy bandwidth measured in the same run) and each GPU-busy fraction from a profile.
#   MODEL=dir [BUILD=build-gpu] [BATCHES=1,8,64,256] [NEW=128] [PROMPT=16] [PEERS=hf,graph] bash bench/gpu/decode.sh
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="${BUILD:-$root/build-gpu}/rlhost"
model="${MODEL:?MODEL=a model directory}"
batches="${BATCHES:-1,8,64,256}" new="${NEW:-128}" prompt="${PROMPT:-16}"
out="${OUT_DIR:-$(mktemp -d)}"
mkdir -p "$out/traces"
log="$out/decode_results.txt"
: > "$log"
"$bin" --no-control "$root/bench/gpu/decode.lua" "$model" "$batches" "$new" "$prompt" "$out/traces" 2>"$out/decode_rlhost.err" \
  | tee -a "$log" || echo "decode.sh: rlhost failed (see $out/decode_rlhost.err)" >&2
# Variants of rlhost's engine, without a profile (VARIANTS="overlap_schedule=off disable_cuda_graph=true").
for v in ${VARIANTS:-overlap_schedule=off}; do
  "$bin" --no-control "$root/bench/gpu/decode.lua" "$model" "$batches" "$new" "$prompt" "" "$v" 2>>"$out/decode_rlhost.err" \
    | sed "s/impl=rlhost /impl=rlhost[$v] /" | tee -a "$log"
done
for t in "$out"/traces/rlhost_b*.trace.json.gz; do
  [ -f "$t" ] && python3 "$root/bench/gpu/trace_busy.py" "$t" | tee -a "$log"
done
python3 "$root/bench/gpu/decode_torch.py" "$model" "$batches" "$new" "$prompt" --only "${PEERS:-hf,graph}" \
  --trace "$out/traces" 2>"$out/decode_torch.err" | tee -a "$log" || echo "decode.sh: peers failed (see $out/decode_torch.err)" >&2
python3 - "$log" "$model" "$new" "$prompt" <<'PY'
import collections, glob, json, os, re, sys
log, model, new, prompt = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
cfg = json.load(open(os.path.join(model, "config.json")))
def numel(path):  # parameters in a safetensors file, from its JSON header
    import struct
    with open(path, "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    n = 0
    for k, v in header.items():
        if k != "__metadata__":
            p = 1
            for d in v["shape"]: p *= d
            n += p
    return n
weights = 2 * sum(numel(f) for f in glob.glob(os.path.join(model, "*.safetensors")))  # bf16 in the engine
H = cfg["hidden_size"]; D = cfg.get("head_dim") or H // cfg["num_attention_heads"]
kv_token = 2 * cfg["num_hidden_layers"] * cfg.get("num_key_value_heads", cfg["num_attention_heads"]) * D * 2  # bf16
rows, bw, busy, variants = collections.defaultdict(dict), None, {}, set()
for line in open(log):
    if not line.startswith("RESULT"): continue
    kv = dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)
    if kv.get("impl") == "bandwidth": bw = float(kv["copy_gb_s"]) * 1e9; continue
    if kv.get("impl") == "trace":
        m = re.search(r"rlhost_b(\d+)", kv["file"])
        if m and kv["gpu_busy"] != "-":
            busy[("rlhost", int(m.group(1)))] = "%.2f/%s" % (float(kv["gpu_busy"]), kv.get("gpu_busy_steady", "-")[:4])
        continue
    b = int(kv["batch"])
    rows[b][kv["impl"]] = float(kv["decode_tok_s"])
    if kv["impl"].startswith("rlhost["): variants.add(kv["impl"])
    if kv.get("gpu_busy", "-") != "-": busy[(kv["impl"], b)] = "%.2f" % float(kv["gpu_busy"])
print("\nmodel %s: %.0f MB of bf16 weights, KV %d B/token; copy bandwidth %s GB/s; %d-token prompts, %d new"
      % (os.path.basename(model.rstrip("/")), weights / 1e6, kv_token, "%.0f" % (bw / 1e9) if bw else "?", prompt, new))
print("%6s %10s %11s %10s %9s %8s %8s %10s %7s" % ("batch", "rlhost", "torch_graph", "hf_gen", "vs graph", "vs hf",
                                                   "roofline", "busy", "busy_pt"))
for b in sorted(rows):
    r = rows[b]; ours, graph, hf = r.get("rlhost", 0), r.get("torch_graph", 0), r.get("hf_generate", 0)
    # one step reads every weight once and each sequence's KV cache (its mean length over the decode)
    step_bytes = weights + b * (prompt + new / 2) * kv_token
    roof = b / (step_bytes / bw) if bw else 0
    print("%6d %10.0f %11.0f %10.0f %8.2fx %7.2fx %7.0f%% %10s %7s" % (
        b, ours, graph, hf, ours / graph if graph else 0, ours / hf if hf else 0, 100 * ours / roof if roof else 0,
        busy.get(("rlhost", b), "-"), busy.get(("torch_graph", b), "-")))
print("busy: GPU-busy fraction of a kineto profile, the whole profile / after its last idle gap over 1 ms (bench/gpu/trace_busy.py)")
for v in sorted(variants):
    print("%s: " % v + ", ".join("batch %d %.0f tok/s (%.2fx the default)" % (b, rows[b][v], rows[b].get("rlhost", 0) / rows[b][v])
                                 for b in sorted(rows) if rows[b].get(v)))
PY
