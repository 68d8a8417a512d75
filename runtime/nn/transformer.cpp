#include "nn/transformer.hpp"

#include "nn/batch_invariant_ops.hpp"
#include "nn/paged_attention.hpp"
#include "nn/panel_memory.hpp"
#include "nn/recompute.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>

#include "model/weight_buckets.hpp"
#include "nn/weights.hpp"
#include "nn/weights_digest.hpp"

namespace rl::nn {
namespace {

void check_ids(const torch::Tensor& ids, int64_t vocab) {
  if (ids.numel() == 0) return;
  const int64_t lo = ids.min().item<int64_t>(), hi = ids.max().item<int64_t>();
  if (lo < 0 || hi >= vocab)
    throw std::out_of_range("token id " + std::to_string(lo < 0 ? lo : hi) + " outside the vocabulary [0, " +
                            std::to_string(vocab) + ")");
}

// float32 on the CPU: the batch-invariant kernels (nn/batch_invariant_ops.hpp), so
// the engine's decode and the trainer's forward compute the same bits.
torch::Tensor project(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                     const bi::PackedWeight& packed = {}) {
  if (bi::active(x)) return bi::linear(x, w, b, packed);
  return b.defined() ? torch::linear(x, w, b) : torch::linear(x, w);
}

// Checks an adapter's model shape against this model's.
void check_adapter_shape(const LoraAdapter& a, const model::ModelConfig& c, const char* where) {
  const auto& m = a.model_config();
  if (m.num_hidden_layers != c.num_hidden_layers || m.hidden_size != c.hidden_size ||
      m.intermediate_size != c.intermediate_size || m.num_attention_heads != c.num_attention_heads ||
      m.num_key_value_heads != c.num_key_value_heads || m.head_dim != c.head_dim || m.vocab_size != c.vocab_size)
    throw std::invalid_argument(std::string(where) + ": the LoRA adapter was made for another model shape (" +
                                std::to_string(m.num_hidden_layers) + " layers, hidden " +
                                std::to_string(m.hidden_size) + ") than this model's (" +
                                std::to_string(c.num_hidden_layers) + " layers, hidden " +
                                std::to_string(c.hidden_size) + ")");
}

}  // namespace

void Transformer::set_lora(std::shared_ptr<const LoraAdapter> adapter) {
  if (adapter) check_adapter_shape(*adapter, config_, "Transformer::set_lora");
  lora_ = std::move(adapter);
}

Transformer::LoraRun Transformer::lora_run(const LoraBatch& lb, int64_t n) const {
  if (lb.adapters.size() != lb.rows.size())
    throw std::invalid_argument("forward_cached: CachedBatch::lora has " + std::to_string(lb.adapters.size()) +
                                " adapters but " + std::to_string(lb.rows.size()) + " row groups");
  LoraRun run;
  std::vector<char> taken(static_cast<size_t>(n), 0);
  for (size_t g = 0; g < lb.adapters.size(); ++g) {
    const auto& a = lb.adapters[g];
    const auto& rows = lb.rows[g];
    if (!a) throw std::invalid_argument("forward_cached: CachedBatch::lora group " + std::to_string(g) + " has no adapter");
    check_adapter_shape(*a, config_, "forward_cached");
    if (!rows.defined() || rows.dim() != 1 || rows.scalar_type() != torch::kInt64)
      throw std::invalid_argument("forward_cached: CachedBatch::lora rows[" + std::to_string(g) +
                                  "] must be a 1-d int64 tensor of row indices");
    if (rows.numel() == 0) continue;
    auto host = rows.to(torch::kCPU).contiguous();
    const int64_t* p = host.data_ptr<int64_t>();
    for (int64_t i = 0; i < host.numel(); ++i) {
      if (p[i] < 0 || p[i] >= n || taken[static_cast<size_t>(p[i])])
        throw std::invalid_argument("forward_cached: CachedBatch::lora rows[" + std::to_string(g) + "] has row " +
                                    std::to_string(p[i]) + (p[i] < 0 || p[i] >= n ? " outside [0, " + std::to_string(n) + ")"
                                                                                : " already in another group"));
      taken[static_cast<size_t>(p[i])] = 1;
    }
    run.adapters.push_back(a.get());
    run.rows.push_back(rows.to(embed_.device()));
  }
  return run;
}

// The same add in both paths: the training path adds the adapter's delta to every
// row; the engine adds each group's delta to its rows (gathered, added, put back),
// which is the same float add per element since the kernels are batch-invariant.
torch::Tensor Transformer::add_lora(const LoraRun* run, torch::Tensor y, const torch::Tensor& x, int64_t layer,
                                    LoraTarget t) const {
  for (size_t g = 0; g < run->adapters.size(); ++g) {
    const auto& rows = run->rows[g];
    if (!rows.defined()) {
      auto d = run->adapters[g]->delta(x, layer, t);
      if (d.defined()) y = y + d;
      continue;
    }
    auto d = run->adapters[g]->delta(x.index_select(0, rows), layer, t);
    if (!d.defined()) continue;
    y = y.index_copy(0, rows, y.index_select(0, rows) + d);
  }
  return y;
}

namespace {

// The training layout's parameters: one storage, each tensor at a 64-byte boundary, laid
// out in the order a whole-model weight sync sends them (model::weight_send_order), so
// the tensors of one bucket lie end to end and go as one view of it, uncopied
// (dist::send_weights). Each is a tensor of its own (its own version counter), not a
// view of a flat tensor.
std::vector<std::pair<std::string, torch::Tensor>> one_storage(const std::vector<model::ModelConfig::TensorSpec>& specs,
                                                              const torch::TensorOptions& options) {
  const int64_t elem = static_cast<int64_t>(c10::elementSize(c10::typeMetaToScalarType(options.dtype())));
  std::vector<std::string> names;
  std::vector<int64_t> bytes;
  for (const auto& spec : specs) {
    int64_t n = 1;
    for (int64_t d : spec.shape) n *= d;
    names.push_back(spec.name);
    bytes.push_back(n * elem);
  }
  std::vector<int64_t> offsets(specs.size());
  int64_t total = 0;
  for (size_t i : model::weight_send_order(names, bytes)) {
    offsets[i] = total;
    total += (bytes[i] + 63) / 64 * 64;
  }
  const at::Storage storage = torch::empty({total}, options.dtype(torch::kUInt8)).storage();
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (size_t i = 0; i < specs.size(); ++i)  // contiguous strides (set_'s default)
    params.emplace_back(specs[i].name, torch::empty({0}, options).set_(storage, offsets[i] / elem, specs[i].shape));
  return params;
}

}  // namespace

Transformer::Transformer(model::ModelConfig config, ModelOptions opts)
    : config_(std::move(config)), opts_(opts), rope_(config_) {
  auto options = torch::TensorOptions().dtype(opts_.dtype).device(opts_.device);
  // Where the exact float32 CPU path reads packed panels (AVX-512, AVX2), the panels are all
  // an engine's matmuls read: its matrices keep the HF [out, in] rows, and a weight
  // update lands in them as sent (a c10d receive goes straight in, no transpose).
  rows_layout_ = opts_.inference_layout && bi::packed_available() && bi::active(torch::empty({0}, options));
  const bool transposed = opts_.inference_layout && !rows_layout_;
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  const auto specs = config_.expected_tensors();
  if (opts_.inference_layout) {
    for (const auto& spec : specs) {
      // A tied embedding in the inference layout is the lm_head matrix itself, stored
      // [hidden, vocab]: the embedding lookup gathers its columns (a few per step), and
      // loads and syncs fill one matrix instead of a copy plus a transposed copy.
      const bool tied_embed = spec.name == "model.embed_tokens.weight" && config_.tie_word_embeddings;
      const bool proj = spec.shape.size() == 2 &&
                        (ends_with(spec.name, "_proj.weight") || spec.name == "lm_head.weight" || tied_embed);
      params_.emplace_back(spec.name, transposed && proj ? torch::empty({spec.shape[1], spec.shape[0]}, options).t()
                                                         : torch::empty(spec.shape, options));
    }
  } else {
    params_ = one_storage(specs, options);
  }
  auto get = [&](const std::string& name) -> torch::Tensor {
    for (auto& [n, t] : params_)
      if (n == name) return t;
    return {};
  };
  embed_ = get("model.embed_tokens.weight");
  final_norm_ = get("model.norm.weight");
  lm_head_ = config_.tie_word_embeddings ? embed_ : get("lm_head.weight");
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) layers_.push_back(make_layer(i, get));
  if (!embed_.defined() || !final_norm_.defined() || !lm_head_.defined())
    throw std::logic_error("Transformer: config.expected_tensors() lacks the embedding, final norm or lm_head");
  if (opts_.inference_layout) fuse_projections();
}

Transformer::Layer Transformer::make_layer(int64_t i, const std::function<torch::Tensor(const std::string&)>& get) const {
  const std::string p = "model.layers." + std::to_string(i) + ".";
  Layer l;
  l.input_norm = get(p + "input_layernorm.weight");
  l.post_norm = get(p + "post_attention_layernorm.weight");
  l.q_w = get(p + "self_attn.q_proj.weight"), l.q_b = get(p + "self_attn.q_proj.bias");
  l.k_w = get(p + "self_attn.k_proj.weight"), l.k_b = get(p + "self_attn.k_proj.bias");
  l.v_w = get(p + "self_attn.v_proj.weight"), l.v_b = get(p + "self_attn.v_proj.bias");
  l.o_w = get(p + "self_attn.o_proj.weight"), l.o_b = get(p + "self_attn.o_proj.bias");
  l.q_norm = get(p + "self_attn.q_norm.weight"), l.k_norm = get(p + "self_attn.k_norm.weight");
  l.gate_w = get(p + "mlp.gate_proj.weight"), l.gate_b = get(p + "mlp.gate_proj.bias");
  l.up_w = get(p + "mlp.up_proj.weight"), l.up_b = get(p + "mlp.up_proj.bias");
  l.down_w = get(p + "mlp.down_proj.weight"), l.down_b = get(p + "mlp.down_proj.bias");
  return l;
}

std::vector<std::vector<size_t>> Transformer::parameter_units() const {
  const int64_t L = config_.num_hidden_layers;
  std::vector<std::vector<size_t>> units(static_cast<size_t>(L + (config_.tie_word_embeddings ? 2 : 3)));
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string& n = params_[i].first;
    if (n == "model.embed_tokens.weight") {
      units[0].push_back(i);
    } else if (n == "model.norm.weight") {
      units[static_cast<size_t>(L + 1)].push_back(i);
    } else if (n == "lm_head.weight") {
      units[static_cast<size_t>(L + 2)].push_back(i);
    } else if (n.rfind("model.layers.", 0) == 0) {
      const int64_t layer = std::stoll(n.substr(13));
      units[static_cast<size_t>(layer + 1)].push_back(i);
    } else {
      throw std::logic_error("Transformer: parameter '" + n + "' belongs to no unit");
    }
  }
  return units;
}

int Transformer::lm_head_unit() const {
  return config_.tie_word_embeddings ? 0 : static_cast<int>(config_.num_hidden_layers + 2);
}

void Transformer::check_whole(const char* what) const {
  if (hooks_)
    throw std::logic_error(std::string(what) + ": the model's parameters are sharded over the trainer's ranks "
                           "(train_backend = \"fsdp\"); the trainer gathers them: tr:save_model, tr:save, tr:sync");
}

// Re-homes each layer's q/k/v (and gate/up) weights and biases as views into one
// fused [in, out] matrix (and bias vector). Parameters keep their HF names and
// shapes; writing them in place writes the fused storage. In the rows layout the
// fused matrix is a view of [out, in] storage: each part is a contiguous block of rows.
void Transformer::fuse_projections() {
  auto options = torch::TensorOptions().dtype(opts_.dtype).device(opts_.device);
  auto rehome = [&](const torch::Tensor& old, const torch::Tensor& view) {
    for (auto& [name, t] : params_)
      if (t.is_same(old)) t = view;
  };
  auto fuse = [&](std::vector<torch::Tensor*> ws, std::vector<torch::Tensor*> bs, torch::Tensor& fw, torch::Tensor& fb) {
    int64_t out = 0;
    const int64_t in = ws[0]->size(1);
    for (auto* w : ws) out += w->size(0);
    fw = rows_layout_ ? torch::empty({out, in}, options).t() : torch::empty({in, out}, options);
    const bool biased = bs[0]->defined();
    if (biased) fb = torch::empty({out}, options);
    int64_t off = 0;
    for (size_t i = 0; i < ws.size(); ++i) {
      const int64_t n = ws[i]->size(0);
      auto wv = fw.narrow(1, off, n).t();
      rehome(*ws[i], wv);
      *ws[i] = wv;
      if (biased && bs[i]->defined()) {
        auto bv = fb.narrow(0, off, n);
        rehome(*bs[i], bv);
        *bs[i] = bv;
      } else if (biased) {
        fb.narrow(0, off, n).zero_();
      }
      off += n;
    }
  };
  for (auto& l : layers_) {
    fuse({&l.q_w, &l.k_w, &l.v_w}, {&l.q_b, &l.k_b, &l.v_b}, l.qkv_w, l.qkv_b);
    fuse({&l.gate_w, &l.up_w}, {&l.gate_b, &l.up_b}, l.gate_up_w, l.gate_up_b);
  }
}

std::unique_ptr<Transformer> Transformer::from_pretrained(const std::filesystem::path& path, ModelOptions opts) {
  if (path.extension() == ".gguf") {
    auto gguf = model::read_gguf(path);
    auto m = std::make_unique<Transformer>(gguf.config, opts);
    m->load(gguf.tensors);
    return m;
  }
  auto config = model::ModelConfig::load(path);
  auto tensors = model::read_safetensors_dir(std::filesystem::is_directory(path) ? path : path.parent_path());
  auto m = std::make_unique<Transformer>(std::move(config), opts);
  m->load(tensors);
  return m;
}

void Transformer::load(const model::TensorSet& tensors) {
  check_whole("Transformer::load");
  model::validate_tensors(tensors, config_);
  torch::NoGradGuard no_grad;
  // Straight from the mapped files into the parameters (the set outlives the copies).
  for (auto& [name, param] : params_) copy_weight(param, tensor_over_view(*tensors.find(name)));
  weights_changed();
}

void Transformer::weights_changed() { weights_changed({}); }

bool Transformer::packs_panels() const {
  return opts_.inference_layout && bi::active(embed_) && bi::packed_available();
}

std::vector<torch::Tensor> Transformer::panel_sources() const {
  std::vector<torch::Tensor> out;
  if (!packs_panels() || hooks_) return out;
  auto add = [&](const torch::Tensor& w) {
    if (w.defined()) out.push_back(w);
  };
  for (const auto& l : layers_) {
    add(l.qkv_w.defined() ? l.qkv_w.t() : torch::Tensor());
    add(l.gate_up_w.defined() ? l.gate_up_w.t() : torch::Tensor());
    add(l.o_w);
    add(l.down_w);
  }
  add(lm_head_);
  return out;
}

void Transformer::weights_changed(std::vector<bi::PackedWeight> ready) {
  torch::NoGradGuard no_grad;
  {
    std::lock_guard<std::mutex> lock(digest_mu_);
    ++weights_generation_;
  }
  if (hooks_) return;  // sharded: nothing derived is kept
  if (config_.tie_word_embeddings && !lm_head_.is_same(embed_)) copy_weight(lm_head_, embed_);
  // The inference layout's matrices, packed once here instead of per GEMM call (into
  // memory the panels they replace leave for the next update).
  const bool pack = packs_panels();
  std::unique_ptr<PanelMemory> memory;
  if (pack && ready.empty()) memory = std::make_unique<PanelMemory>(panel_sources());
  size_t next = 0;  // in panel_sources() order
  auto packed = [&](const torch::Tensor& w) {
    if (!pack || !w.defined()) return bi::PackedWeight{};
    const size_t k = next++;
    const bool fits = k < ready.size() && ready[k].defined() && ready[k].n == w.size(0) && ready[k].k == w.size(1);
    return fits ? std::move(ready[k]) : memory ? memory->pack(k, w) : bi::pack(w);
  };
  for (auto& l : layers_) {
    l.qkv_p = packed(l.qkv_w.defined() ? l.qkv_w.t() : torch::Tensor());
    l.gate_up_p = packed(l.gate_up_w.defined() ? l.gate_up_w.t() : torch::Tensor());
    l.o_p = packed(l.o_w);
    l.down_p = packed(l.down_w);
  }
  lm_head_p_ = packed(lm_head_);
}

const bi::PackedWeight& PackedCache::get(const torch::Tensor& w) {
  if (!bi::packed_available() || !bi::simd_kernels()) return packed_;  // empty
  const int64_t v = w._version();
  if (!packed_.defined() || data_ != w.data_ptr() || version_ != v) {
    // Repacked into the old panels' memory where nothing else holds them (a training
    // step repacks every matrix: fresh pages would each cost a fault and a zeroing).
    const bool reuse = packed_.defined() && packed_.data.use_count() == 1 && packed_.n == w.size(0) &&
                       packed_.k == w.size(1);
    packed_ = bi::pack(w, reuse ? std::move(packed_.data) : nullptr);
    data_ = w.data_ptr();
    version_ = v;
  }
  return packed_;
}

const bi::PackedWeight& Transformer::panels(const bi::PackedWeight& p, PackedCache& cache, const torch::Tensor& w,
                                            const torch::Tensor& x) const {
  static const bi::PackedWeight none;
  if (p.defined() || opts_.inference_layout || !w.defined() || !bi::active(x)) return p.defined() ? p : none;
  return cache.get(w);
}

const bi::PackedWeight& Transformer::lm_head_packed() {
  static const bi::PackedWeight none;
  if (lm_head_p_.defined()) return lm_head_p_;
  if (opts_.inference_layout || !bi::active(lm_head_)) return none;
  return lm_head_c_.get(lm_head_);
}

std::string Transformer::exact_weights_digest() {
  std::lock_guard<std::mutex> lock(digest_mu_);
  if (hooks_) return {};  // sharded: the trainer gathers to digest (trainer/fsdp.hpp)
  if (digest_generation_ != weights_generation_) {
    digest_ = bi::active(embed_) && embed_.device().is_cpu() ? weights_digest(params_) : std::string();
    digest_generation_ = weights_generation_;
  }
  if (lora_) return lora_weights_digest(digest_, *lora_);  // the adapter changes without weights_changed()
  return digest_;
}

void Transformer::init_random(uint64_t seed) {
  check_whole("Transformer::init_random");
  const double std = config_.raw.value("initializer_range", 0.02);
  init_parameters(params_, seed, std);
  weights_changed();
}

torch::Tensor Transformer::parameter(const std::string& name) const {
  for (const auto& [n, t] : params_)
    if (n == name) return t;
  throw std::out_of_range("model has no parameter '" + name + "' (" + config_.architecture + ", " +
                          std::to_string(params_.size()) + " parameters)");
}

void Transformer::set_requires_grad(bool on) {
  for (auto& [name, t] : params_) t.requires_grad_(on);
}

torch::Tensor Transformer::rms_norm(const torch::Tensor& x, const torch::Tensor& w) const {
  if (bi::active(x)) return bi::rms_norm(x, w, config_.rms_norm_eps);
  // As transformers: normalise in float32, cast back, then scale.
  auto xf = x.to(torch::kFloat32);
  xf = xf * torch::rsqrt(xf.pow(2).mean(-1, true) + config_.rms_norm_eps);
  return w * xf.to(x.scalar_type());
}

// The tied embedding in the transposed inference layout is lm_head's [hidden, vocab]
// matrix: a token's column has its floats a whole row apart, one page each. Its packed
// copy (same values) holds the column inside one panel, kPanelCols floats apart.
torch::Tensor Transformer::embed_tokens(const torch::Tensor& ids) const {
  if (!lm_head_p_.defined() || !config_.tie_word_embeddings || embed_.stride(1) == 1 || !ids.device().is_cpu() ||
      ids.scalar_type() != torch::kInt64 || ids.numel() == 0 || (torch::GradMode::is_enabled() && embed_.requires_grad()))
    return torch::embedding(embed_, ids);
  auto flat = ids.reshape({-1}).contiguous();
  auto out = torch::empty({flat.numel(), config_.hidden_size}, embed_.options());
  bi::packed_columns(lm_head_p_, flat.data_ptr<int64_t>(), flat.numel(), out.data_ptr<float>());
  auto shape = ids.sizes().vec();
  shape.push_back(config_.hidden_size);
  return out.view(shape);
}

torch::Tensor Transformer::mlp(const Layer& l, const torch::Tensor& x, int64_t layer, const LoraRun* lora) const {
  const bool exact = bi::active(x);
  auto silu_mul = [&](const torch::Tensor& g, const torch::Tensor& u) {
    return exact ? bi::silu_mul(g, u) : torch::silu(g) * u;
  };
  if (l.gate_up_w.defined()) {
    torch::Tensor gu;
    if (exact) {
      gu = bi::linear(x, l.gate_up_w.t(), l.gate_up_b, l.gate_up_p);
    } else {
      gu = torch::matmul(x, l.gate_up_w);
      if (l.gate_up_b.defined()) gu = gu + l.gate_up_b;
    }
    const int64_t I = l.gate_w.size(0);
    auto g = gu.narrow(-1, 0, I), u = gu.narrow(-1, I, I);
    if (lora) {
      g = add_lora(lora, g, x, layer, LoraTarget::gate_proj);
      u = add_lora(lora, u, x, layer, LoraTarget::up_proj);
    }
    auto h = silu_mul(g, u);
    auto y = project(h, l.down_w, l.down_b, l.down_p);
    return lora ? add_lora(lora, y, h, layer, LoraTarget::down_proj) : y;
  }
  auto g = project(x, l.gate_w, l.gate_b, panels({}, l.gate_c, l.gate_w, x));
  auto u = project(x, l.up_w, l.up_b, panels({}, l.up_c, l.up_w, x));
  if (lora) {
    g = add_lora(lora, g, x, layer, LoraTarget::gate_proj);
    u = add_lora(lora, u, x, layer, LoraTarget::up_proj);
  }
  auto h = silu_mul(g, u);
  auto y = project(h, l.down_w, l.down_b, panels(l.down_p, l.down_c, l.down_w, x));
  return lora ? add_lora(lora, y, h, layer, LoraTarget::down_proj) : y;
}

// q, k, v for `x` [..., hidden] as [..., heads, head_dim], with q/k norm and RoPE applied.
torch::Tensor Transformer::attention_inputs(const Layer& l, const torch::Tensor& x, const torch::Tensor& cos,
                                            const torch::Tensor& sin, torch::Tensor& k, torch::Tensor& v,
                                            int64_t layer, const LoraRun* lora) const {
  auto lead = x.sizes().vec();
  lead.pop_back();
  auto heads_shape = [&](int64_t heads) {
    auto s = lead;
    s.push_back(heads);
    s.push_back(config_.head_dim);
    return s;
  };
  torch::Tensor q;
  if (l.qkv_w.defined()) {
    torch::Tensor qkv;
    if (bi::active(x)) {
      qkv = bi::linear(x, l.qkv_w.t(), l.qkv_b, l.qkv_p);
    } else {
      qkv = torch::matmul(x, l.qkv_w);
      if (l.qkv_b.defined()) qkv = qkv + l.qkv_b;
    }
    const int64_t qd = l.q_w.size(0), kd = l.k_w.size(0);
    q = qkv.narrow(-1, 0, qd);
    k = qkv.narrow(-1, qd, kd);
    v = qkv.narrow(-1, qd + kd, kd);
  } else {
    q = project(x, l.q_w, l.q_b, panels({}, l.q_c, l.q_w, x));
    k = project(x, l.k_w, l.k_b, panels({}, l.k_c, l.k_w, x));
    v = project(x, l.v_w, l.v_b, panels({}, l.v_c, l.v_w, x));
  }
  if (lora) {
    q = add_lora(lora, q, x, layer, LoraTarget::q_proj);
    k = add_lora(lora, k, x, layer, LoraTarget::k_proj);
    v = add_lora(lora, v, x, layer, LoraTarget::v_proj);
  }
  q = q.reshape(heads_shape(config_.num_attention_heads));
  k = k.reshape(heads_shape(config_.num_key_value_heads));
  v = v.reshape(heads_shape(config_.num_key_value_heads));
  if (config_.qk_norm) {
    q = rms_norm(q, l.q_norm);
    k = rms_norm(k, l.k_norm);
  }
  k = apply_rope(k, cos, sin);
  return apply_rope(q, cos, sin);
}

template <class Attend>
torch::Tensor Transformer::run_layer(int64_t i, torch::Tensor x, const torch::Tensor& cos, const torch::Tensor& sin,
                                     Attend& attend, const LoraRun* lora,
                                     const std::vector<std::vector<size_t>>& units) {
  const Layer* lp = &layers_[static_cast<size_t>(i)];
  Layer gathered;
  const int unit = static_cast<int>(i + 1);
  if (hooks_) {  // sharded: this layer's parameters, gathered for this use
    const auto ts = hooks_->enter(unit);
    const auto& idx = units[static_cast<size_t>(unit)];
    gathered = make_layer(i, [&](const std::string& name) -> torch::Tensor {
      for (size_t j = 0; j < idx.size(); ++j)
        if (params_[idx[j]].first == name) return ts[j];
      return {};
    });
    lp = &gathered;
  }
  const Layer& l = *lp;
  torch::Tensor k, v;
  auto q = attention_inputs(l, rms_norm(x, l.input_norm), cos, sin, k, v, i, lora);
  auto a = attend(q, k, v, i);
  auto o = project(a, l.o_w, l.o_b, panels(l.o_p, l.o_c, l.o_w, x));
  if (lora) o = add_lora(lora, o, a, i, LoraTarget::o_proj);
  x = x + o;
  x = x + mlp(l, rms_norm(x, l.post_norm), i, lora);
  if (hooks_) x = hooks_->leave(unit, x);
  return x;
}

void Transformer::set_recompute(Recompute r) {
  if (r.num_layers < 1)
    throw std::invalid_argument("recompute: num_layers must be >= 1 (got " + std::to_string(r.num_layers) + ")");
  recompute_ = r;
}

std::vector<std::pair<int64_t, int64_t>> Transformer::recomputed_groups() const {
  std::vector<std::pair<int64_t, int64_t>> out;
  const int64_t L = static_cast<int64_t>(layers_.size()), n = recompute_.num_layers;
  if (recompute_.method == Recompute::Method::uniform)
    for (int64_t a = 0; a < L; a += n) out.emplace_back(a, std::min(L, a + n));
  else if (recompute_.method == Recompute::Method::block)
    for (int64_t a = 0; a < std::min(L, n); ++a) out.emplace_back(a, a + 1);
  return out;
}

template <class Attend>
torch::Tensor Transformer::run_layers(torch::Tensor x, const torch::Tensor& positions, Attend&& attend,
                                      const LoraRun* lora, bool recomputable) {
  auto [cos, sin] = rope_.lookup(positions, opts_.dtype);
  std::vector<std::vector<size_t>> units;
  if (hooks_) units = parameter_units();
  const auto groups = recomputable && torch::GradMode::is_enabled() ? recomputed_groups()
                                                                    : std::vector<std::pair<int64_t, int64_t>>{};
  int64_t i = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const int64_t first = groups[g].first, end = groups[g].second;
    for (; i < first; ++i) x = run_layer(i, x, cos, sin, attend, lora, units);
    // The block owns what it reads: it runs again after this forward returns.
    std::optional<LoraRun> run;
    if (lora) run = *lora;
    Block block = [this, first, end, cos = cos, sin = sin, attend, run, units](const torch::Tensor& in) mutable {
      torch::Tensor y = in;
      for (int64_t j = first; j < end; ++j) y = run_layer(j, y, cos, sin, attend, run ? &*run : nullptr, units);
      return y;
    };
    RecomputeHooks around;
    if (hooks_) {
      // The backward pass recomputes the groups in reverse: after this one, the one before
      // it when it ends where this begins.
      const int next = g > 0 && groups[g - 1].second == first ? static_cast<int>(groups[g - 1].first + 1) : -1;
      around.begin = [this, first, end, next] {
        hooks_->recompute_begin(static_cast<int>(first + 1), static_cast<int>(end), next);
      };
      around.end = [this] { hooks_->recompute_end(); };
    }
    x = nn::recompute(x, std::move(block), std::move(around));
    i = end;
  }
  for (; i < static_cast<int64_t>(layers_.size()); ++i) x = run_layer(i, x, cos, sin, attend, lora, units);
  if (!hooks_) return rms_norm(x, final_norm_);
  const int norm_unit = static_cast<int>(layers_.size() + 1);
  const auto ts = hooks_->enter(norm_unit);
  return hooks_->leave(norm_unit, rms_norm(x, ts.at(0)));
}

torch::Tensor Transformer::forward(const torch::Tensor& input_ids, const torch::Tensor& positions) {
  if (input_ids.dim() != 2) throw std::invalid_argument("forward: input_ids must be [batch, seq]");
  const int64_t B = input_ids.size(0), T = input_ids.size(1);
  auto pos = positions.defined() ? positions
                                 : torch::arange(T, torch::TensorOptions().dtype(torch::kInt64).device(input_ids.device()))
                                       .unsqueeze(0)
                                       .expand({B, T});
  return forward_rows(input_ids, pos, {});
}

torch::Tensor Transformer::forward_packed(const torch::Tensor& input_ids, const std::vector<int64_t>& lens) {
  if (input_ids.dim() != 2 || input_ids.size(0) != 1)
    throw std::invalid_argument("forward_packed: input_ids must be [1, total] (the sequences end to end)");
  if (lens.empty()) throw std::invalid_argument("forward_packed: no sequences");
  std::vector<int64_t> pos;
  pos.reserve(static_cast<size_t>(input_ids.size(1)));
  for (int64_t n : lens) {
    if (n < 1) throw std::invalid_argument("forward_packed: every sequence length must be >= 1");
    for (int64_t j = 0; j < n; ++j) pos.push_back(j);
  }
  if (static_cast<int64_t>(pos.size()) != input_ids.size(1))
    throw std::invalid_argument("forward_packed: the lengths add up to " + std::to_string(pos.size()) +
                                " tokens, input_ids holds " + std::to_string(input_ids.size(1)));
  auto positions = torch::tensor(pos, torch::kInt64).to(input_ids.device()).unsqueeze(0);
  return forward_rows(input_ids, positions, lens);
}

torch::Tensor Transformer::forward(const SequenceBatch& batch) {
  auto ids = batch.ids.to(options().device);
  return batch.lens.empty() ? forward(ids) : forward_packed(ids, batch.lens);
}

SequenceBatch lay_out(const std::vector<const std::vector<int64_t>*>& seqs, bool end_to_end, int64_t min_len) {
  SequenceBatch out;
  const int64_t B = static_cast<int64_t>(seqs.size());
  int64_t L = min_len, total = 0;
  for (const auto* s : seqs) {
    L = std::max<int64_t>(L, static_cast<int64_t>(s->size()));
    total += static_cast<int64_t>(s->size());
  }
  out.ids = end_to_end ? torch::empty({1, total}, torch::kInt64) : torch::zeros({B, L}, torch::kInt64);
  int64_t* ids = out.ids.data_ptr<int64_t>();
  int64_t start = 0;
  for (int64_t b = 0; b < B; ++b) {
    const auto& s = *seqs[static_cast<size_t>(b)];
    const int64_t n = static_cast<int64_t>(s.size());
    if (!end_to_end) start = b * L;
    std::copy(s.begin(), s.end(), ids + start);
    out.starts.push_back(start);
    if (end_to_end) {
      out.lens.push_back(n);
      start += n;
    }
  }
  return out;
}

torch::Tensor Transformer::forward_rows(const torch::Tensor& input_ids, const torch::Tensor& pos,
                                        const std::vector<int64_t>& lens) {
  check_ids(input_ids, config_.vocab_size);
  const double scale = 1.0 / std::sqrt(static_cast<double>(config_.head_dim));
  const bool gqa = config_.num_attention_heads != config_.num_key_value_heads;
  torch::Tensor x;
  if (hooks_) x = hooks_->embed(input_ids);
  else x = embed_tokens(input_ids);
  LoraRun run;
  if (lora_) {
    run.adapters.push_back(lora_.get());
    run.rows.emplace_back();
  }
  const auto sdpa = [scale, gqa](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    auto o = at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), {}, 0.0,
                                              /*is_causal=*/true, scale, gqa);
    return o.transpose(1, 2).reshape({q.size(0), q.size(1), -1});
  };
  // By value: recomputed layers (set_recompute) call it again in the backward pass.
  return run_layers(x, pos, [scale, lens, sdpa](const torch::Tensor& q, const torch::Tensor& k,
                                                const torch::Tensor& v, int64_t) {
    if (bi::active(q)) return bi::causal_attention(q, k, v, scale, lens);
    if (lens.empty()) return sdpa(q, k, v);
    std::vector<torch::Tensor> parts;  // packed: each sequence on its own
    int64_t start = 0;
    for (int64_t n : lens) {
      parts.push_back(sdpa(q.narrow(1, start, n), k.narrow(1, start, n), v.narrow(1, start, n)));
      start += n;
    }
    return torch::cat(parts, 1);
  }, lora_ ? &run : nullptr, /*recomputable=*/true);
}

torch::Tensor Transformer::logits(const torch::Tensor& hidden) const {
  check_whole("Transformer::logits");
  if (lora_lm_head()) return project(hidden, effective_lm_head(), torch::Tensor());
  return project(hidden, lm_head_, torch::Tensor(), lm_head_p_);
}

torch::Tensor Transformer::logits_with(const torch::Tensor& hidden, const torch::Tensor& lm_head) const {
  check_whole("Transformer::logits_with");
  return project(hidden, lm_head, torch::Tensor());
}

torch::Tensor Transformer::effective_lm_head() const {
  return lora_lm_head() ? lora_->merged_lm_head(lm_head_) : lm_head_;
}

TokenLogprobs Transformer::sequence_logprobs(const torch::Tensor& input_ids, double temperature, bool with_entropy) {
  check_whole("Transformer::sequence_logprobs");
  const int64_t B = input_ids.size(0), T = input_ids.size(1);
  if (T < 2) throw std::invalid_argument("sequence_logprobs: need at least 2 tokens per sequence");
  auto hidden = forward(input_ids).narrow(1, 0, T - 1).reshape({-1, config_.hidden_size});
  auto targets = input_ids.narrow(1, 1, T - 1).reshape({-1});
  auto out = lora_lm_head() ? token_logprobs(hidden, effective_lm_head(), targets, temperature, with_entropy)
                            : token_logprobs(hidden, lm_head_, targets, temperature, with_entropy, 0, -1,
                                             &lm_head_packed());
  out.logprobs = out.logprobs.view({B, T - 1});
  if (out.entropy.defined()) out.entropy = out.entropy.view({B, T - 1});
  return out;
}

KVCache Transformer::new_kv_cache(int64_t num_blocks, int64_t block_size) const {
  KVCache c;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  auto options = torch::TensorOptions().dtype(opts_.dtype).device(opts_.device);
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    c.k.push_back(torch::zeros({num_blocks * block_size, config_.num_key_value_heads, config_.head_dim}, options));
    c.v.push_back(torch::zeros({num_blocks * block_size, config_.num_key_value_heads, config_.head_dim}, options));
  }
  return c;
}

namespace {

// The batch's shapes agree with each other, with the cache and with input_ids.
void check_cached_batch(const CachedBatch& b, const KVCache& cache, int64_t num_layers) {
  const int64_t S = static_cast<int64_t>(b.query_lens.size());
  const int64_t N = b.input_ids.size(0);
  if (S == 0 || b.context_lens.size() != b.query_lens.size() || b.context_slots.size(0) != S)
    throw std::invalid_argument("forward_cached: query_lens, context_lens and context_slots disagree on the batch size");
  if (static_cast<int64_t>(cache.k.size()) != num_layers)
    throw std::invalid_argument("forward_cached: the KV cache was made for another model");
  int64_t total = 0;
  for (int64_t s = 0; s < S; ++s) {
    if (b.query_lens[s] < 1 || b.query_lens[s] > b.context_lens[s])
      throw std::invalid_argument("forward_cached: sequence " + std::to_string(s) + " has query_len " +
                                  std::to_string(b.query_lens[s]) + " and context_len " +
                                  std::to_string(b.context_lens[s]));
    if (b.context_lens[s] > b.context_slots.size(1))
      throw std::invalid_argument("forward_cached: sequence " + std::to_string(s) + " has context_len " +
                                  std::to_string(b.context_lens[s]) + " but context_slots has " +
                                  std::to_string(b.context_slots.size(1)) + " columns");
    total += b.query_lens[s];
  }
  if (total != N) throw std::invalid_argument("forward_cached: query_lens sum to " + std::to_string(total) +
                                              " but input_ids has " + std::to_string(N) + " tokens");
}

// For paged attention over every new token: its sequence, and the length of the causal
// context it sees.
std::pair<std::vector<int64_t>, std::vector<int64_t>> query_contexts(const CachedBatch& b) {
  std::vector<int64_t> seq_of_query, ctx_of_query;
  seq_of_query.reserve(static_cast<size_t>(b.input_ids.size(0)));
  ctx_of_query.reserve(static_cast<size_t>(b.input_ids.size(0)));
  for (int64_t s = 0; s < static_cast<int64_t>(b.query_lens.size()); ++s)
    for (int64_t i = 0; i < b.query_lens[s]; ++i) {
      seq_of_query.push_back(s);
      ctx_of_query.push_back(b.context_lens[s] - b.query_lens[s] + i + 1);
    }
  return {std::move(seq_of_query), std::move(ctx_of_query)};
}

// The mixed path's split: decoding sequences (one new token; `fast`: the paged decode
// kernel supports the cache) attend straight from the cache; the rest (prefills) through
// a padded gather of their context, a causal mask and SDPA.
struct MixedPlan {
  std::vector<int64_t> dec_seq, dec_len;
  torch::Tensor dec_tok, dec_slots;            // decode tokens' rows in the batch, their sequences' slots
  int64_t SP = 0, max_q = 0, max_ctx = 0;      // prefilling sequences, longest query and context
  torch::Tensor pre_tok, pre_slots, query_index, mask;
};

MixedPlan plan_mixed(const CachedBatch& b, bool fast) {
  const int64_t S = static_cast<int64_t>(b.query_lens.size());
  const auto dev = b.input_ids.device();
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  MixedPlan m;
  std::vector<int64_t> dec_tok, pre_tok, pre_seq;
  int64_t off = 0;
  for (int64_t s = 0; s < S; ++s) {
    if (fast && b.query_lens[s] == 1) {
      dec_tok.push_back(off);
      m.dec_seq.push_back(s);
      m.dec_len.push_back(b.context_lens[s]);
    } else {
      pre_seq.push_back(s);
      for (int64_t i = 0; i < b.query_lens[s]; ++i) pre_tok.push_back(off + i);
    }
    off += b.query_lens[s];
  }
  m.SP = static_cast<int64_t>(pre_seq.size());
  if (!m.dec_seq.empty()) {
    m.dec_tok = torch::tensor(dec_tok, i64).to(dev);
    m.dec_slots = m.dec_seq.size() == static_cast<size_t>(S)
                      ? b.context_slots
                      : b.context_slots.index_select(0, torch::tensor(m.dec_seq, i64).to(dev));
  }
  if (m.SP == 0) return m;
  for (int64_t s : pre_seq) {
    m.max_q = std::max(m.max_q, b.query_lens[s]);
    m.max_ctx = std::max(m.max_ctx, b.context_lens[s]);
  }
  m.pre_tok = torch::tensor(pre_tok, i64).to(dev);
  m.pre_slots = (m.SP == S ? b.context_slots : b.context_slots.index_select(0, torch::tensor(pre_seq, i64).to(dev)))
                    .narrow(1, 0, m.max_ctx)
                    .reshape({-1});
  // Where each new token sits in the padded [SP, max_q] query grid.
  std::vector<int64_t> qidx, ctx_lens, q_lens;
  for (int64_t p = 0; p < m.SP; ++p) {
    const int64_t s = pre_seq[p];
    for (int64_t i = 0; i < b.query_lens[s]; ++i) qidx.push_back(p * m.max_q + i);
    ctx_lens.push_back(b.context_lens[s]);
    q_lens.push_back(b.query_lens[s]);
  }
  m.query_index = torch::tensor(qidx, i64).to(dev);
  // Key j is visible to query i of sequence s iff j <= ctx_len - q_len + i (causal) and j < ctx_len.
  auto ctx = torch::tensor(ctx_lens, i64).to(dev).view({m.SP, 1, 1});
  auto qlen = torch::tensor(q_lens, i64).to(dev).view({m.SP, 1, 1});
  auto qi = torch::arange(m.max_q, i64.device(dev)).view({1, m.max_q, 1});
  auto kj = torch::arange(m.max_ctx, i64.device(dev)).view({1, 1, m.max_ctx});
  m.mask = (kj <= ctx - qlen + qi).logical_and(kj < ctx).unsqueeze(1);  // [SP, 1, max_q, max_ctx]
  return m;
}

}  // namespace

torch::Tensor Transformer::forward_cached(const CachedBatch& b, KVCache& cache) {
  check_whole("Transformer::forward_cached");
  torch::NoGradGuard no_grad;
  check_cached_batch(b, cache, config_.num_hidden_layers);
  const int64_t N = b.input_ids.size(0);
  const int64_t H = config_.num_attention_heads, KV = config_.num_key_value_heads, D = config_.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const bool gqa = H != KV;

  check_ids(b.input_ids, config_.vocab_size);
  LoraRun run;
  if (!b.lora.empty()) run = lora_run(b.lora, N);
  const LoraRun* lora = run.adapters.empty() ? nullptr : &run;
  // float32 on the CPU: every new token, decoding or prefilling, attends over its
  // causal context straight from the cache with the kernel the trainer's forward
  // uses (nn/batch_invariant_ops.hpp), so both compute the same bits.
  if (paged_decode_supported(embed_, cache.k[0]) && bi::active(embed_)) {
    const auto qc = query_contexts(b);  // per new token: its sequence, its context length
    return run_layers(embed_tokens(b.input_ids), b.positions,
                      [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, int64_t layer) {
                        write_cache_rows(cache.k[layer], b.slot_mapping, k);
                        write_cache_rows(cache.v[layer], b.slot_mapping, v);
                        return paged_attention(q, cache.k[layer], cache.v[layer], b.context_slots, qc.first,
                                               qc.second, scale)
                            .reshape({-1, H * D});
                      }, lora);
  }

  const MixedPlan m = plan_mixed(b, paged_decode_supported(embed_, cache.k[0]));
  return run_layers(embed_tokens(b.input_ids), b.positions, [&](const torch::Tensor& q, const torch::Tensor& k,
                                                                const torch::Tensor& v, int64_t layer) {
    write_cache_rows(cache.k[layer], b.slot_mapping, k);
    write_cache_rows(cache.v[layer], b.slot_mapping, v);
    torch::Tensor o_dec, o_pre;
    if (m.dec_tok.defined()) {
      auto qd = m.SP == 0 ? q : q.index_select(0, m.dec_tok);
      o_dec = paged_decode_attention(qd, cache.k[layer], cache.v[layer], m.dec_slots, m.dec_len, scale)
                  .reshape({-1, H * D});
      if (m.SP == 0) return o_dec;
    }
    const int64_t SP = m.SP, max_q = m.max_q, max_ctx = m.max_ctx;
    auto qs = m.dec_seq.empty() ? q : q.index_select(0, m.pre_tok);
    auto kc = cache.k[layer].index_select(0, m.pre_slots).view({SP, max_ctx, KV, D}).transpose(1, 2);
    auto vc = cache.v[layer].index_select(0, m.pre_slots).view({SP, max_ctx, KV, D}).transpose(1, 2);
    auto qp = torch::zeros({SP * max_q, H, D}, q.options()).index_copy_(0, m.query_index, qs);
    auto o = at::scaled_dot_product_attention(qp.view({SP, max_q, H, D}).transpose(1, 2), kc, vc, m.mask, 0.0, false,
                                              scale, gqa);
    o_pre = o.transpose(1, 2).reshape({SP * max_q, H * D}).index_select(0, m.query_index);
    if (m.dec_seq.empty()) return o_pre;
    auto out = torch::empty({N, H * D}, q.options());
    out.index_copy_(0, m.dec_tok, o_dec);
    out.index_copy_(0, m.pre_tok, o_pre);
    return out;
  }, lora);
}

void Transformer::save(const std::filesystem::path& dir, size_t max_shard_bytes) const {
  check_whole("Transformer::save");
  save_model_dir(dir, config_, params_, opts_.dtype, max_shard_bytes);
}

}  // namespace rl::nn
