// A c10d process group for data-parallel training and distributed weight sync:
// TCPStore rendezvous (rank 0 hosts the store), Gloo on the CPU, NCCL when built
// with CUDA and the group's tensors live on a GPU. Every collective is waited with
// the group's timeout; expiry or a failed peer throws rl::Error naming the op,
// the rank and the timeout, so nothing that uses a group can hang.
//
// LibTorch-free header (at::Tensor is only declared) so that the engine's HTTP
// server, compiled without LibTorch, can hold groups; dist.cpp is the only file
// that includes c10d.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace at {
class Tensor;
}

namespace rl::dist {

struct GroupOptions {
  std::string master_addr = "127.0.0.1";
  int master_port = 0;         // rank 0 with port 0: an ephemeral port (port() tells it)
  int rank = 0;
  int world_size = 1;
  double timeout_s = 300;      // rendezvous and every collective
  std::string backend = "gloo";  // gloo | nccl (a CUDA build) | auto (nccl when a GPU is there)
  int device_index = 0;        // nccl: the GPU of this rank (LOCAL_RANK)
  std::string name = "default";  // in error messages
  // torchrun (TORCHELASTIC_USE_AGENT_STORE): MASTER_ADDR:MASTER_PORT is its agent's
  // store, which every rank joins as a client (rank 0 starts none).
  bool agent_store = false;
  // Keys under this prefix (torchrun: "rlhost/attempt_<k>/", k counted in the agent's
  // store, dist.cpp), so that they never meet the agent's own keys or a restarted
  // attempt the last one's. Set for a group at the agent store's address.
  std::string store_prefix;
};

// torchrun's environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK,
// TORCHELASTIC_USE_AGENT_STORE. nullopt when WORLD_SIZE
// is unset; throws rl::Error naming a missing or bad variable (WORLD_SIZE=2 without
// MASTER_PORT, RANK >= WORLD_SIZE, ...).
std::optional<GroupOptions> options_from_env();

class ProcessGroup {
 public:
  // Creates the store: rank 0 starts the TCPStore server (immediately; port()
  // is then known), other ranks connect to it (retrying until the timeout).
  explicit ProcessGroup(GroupOptions opts);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Forms the backend: blocks until every rank has joined, or throws on timeout.
  // Idempotent; collectives call it first.
  void connect();

  int rank() const;
  int world_size() const;
  int port() const;
  double timeout_s() const;
  const GroupOptions& options() const;

  // In place over all ranks (same tensors, same order on every rank).
  void allreduce_sum(std::vector<at::Tensor>& tensors, const std::string& what);
  // Averages gradients (after backward): flattened in buckets, summed, / world_size.
  void allreduce_mean_grads(const std::vector<at::Tensor>& params, const std::string& what);
  void broadcast(std::vector<at::Tensor>& tensors, int root, const std::string& what);
  void barrier();
  // Sharded training (trainer/fsdp.hpp). `out` (world_size × in.numel(), contiguous)
  // gets every rank's `in`, rank r's at r × in.numel(). Returns at once; the gather
  // completes by Pending::wait (Gloo's and NCCL's own threads and streams move the
  // bytes meanwhile). Collectives issued later queue behind it, in the same order
  // on every rank.
  class Pending;
  std::shared_ptr<Pending> all_gather_async(const at::Tensor& out, const at::Tensor& in, const std::string& what);
  // `t` from `root` to every rank (root's is sent, the others' filled; a tensor that is
  // not contiguous on the group's device goes through a copy): returns at once, as
  // all_gather_async; the tensor is written by the time wait() returns.
  std::shared_ptr<Pending> broadcast_async(const at::Tensor& t, int root, const std::string& what);
  // out (in.numel() / world_size) = the sum over ranks of this rank's slice of `in`.
  void reduce_scatter_sum(const at::Tensor& out, const at::Tensor& in, const std::string& what);
  // `t` (contiguous, on the group's device) summed over ranks into root's `t`; the
  // other ranks' `t` are left as the backend leaves them (scratch).
  void reduce_sum(const at::Tensor& t, int root, const std::string& what);

  // A byte string from `root` to every rank (root's `blob` is returned everywhere).
  std::string broadcast_bytes(const std::string& blob, int root);
  // Rank i gets blobs[i] (blobs given on root only: world_size entries).
  std::string scatter_bytes(const std::vector<std::string>& blobs, int root);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// An issued collective: wait() blocks until it is done (or throws rl::Error as any
// collective of the group does); the destructor waits too, swallowing errors, unless a
// collective of the group has already failed (then it leaves it to the group's abort).
class ProcessGroup::Pending {
 public:
  Pending(ProcessGroup* g, std::string what, std::function<void()> wait);
  ~Pending();
  Pending(const Pending&) = delete;
  Pending& operator=(const Pending&) = delete;
  void wait();

 private:
  ProcessGroup* g_;
  std::string what_;
  std::function<void()> wait_;
  bool done_ = false;
};

// A client of a job's c10d store — rank 0's TCPStore at master_addr:master_port, or
// torchrun's agent store — with keys of its own under "<store_prefix>rlhost/kv/<name>/",
// apart from every group's: a multi-host job's hosts find each other's engines there
// (lua/rl/recipe/hosts.lua). Its own connection, so that a collective in flight on a
// group never delays it. Every call waits at most the timeout and throws rl::Error
// naming the key and the store.
class KeyValueStore {
 public:
  KeyValueStore(const GroupOptions& o, const std::string& name, double timeout_s);
  ~KeyValueStore();
  KeyValueStore(const KeyValueStore&) = delete;
  KeyValueStore& operator=(const KeyValueStore&) = delete;
  void set(const std::string& key, const std::string& value);
  // The value, or nullopt when no one set the key (never waits for it).
  std::optional<std::string> get(const std::string& key);
  // Adds delta to a counter (0 when new) and returns the sum.
  int64_t add(const std::string& key, int64_t delta);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The group rl.dist.init set up (data parallel): the trainer all-reduces gradients
// over it when world_size > 1. Null when none.
std::shared_ptr<ProcessGroup> default_group();
void set_default_group(std::shared_ptr<ProcessGroup> g);

// ---- distributed weight sync (SGLang's /update_weights_from_distributed) ----------

struct WeightMeta {
  std::vector<std::string> names;
  std::vector<std::string> dtypes;  // "float32", "bfloat16", ... ("torch." prefix allowed)
  std::vector<std::vector<int64_t>> shapes;
  // The values the shapes announce, summed (saturating at 2^50; a negative size counts
  // as that much): what a receiver checks before it allocates for them.
  int64_t values() const;
};

// Both sides cut the tensors, in order, into the same buckets: consecutive tensors of
// one dtype packed into one flat buffer of at most bucket_bytes (a larger tensor goes
// alone), one broadcast per bucket. Towards the end the cap shrinks to half of what is
// left (not below bucket_bytes / 16): a receiver installs a bucket once all of it is in,
// so the last one's install is what no transfer hides. bucket_bytes 0: one broadcast
// per tensor (what SGLang's endpoint takes). Returns [begin, end) index ranges.
std::vector<std::pair<size_t, size_t>> weight_buckets(const std::vector<std::string>& dtypes,
                                                      const std::vector<int64_t>& bytes, int64_t bucket_bytes);
// Both sides keep up to this many bytes of broadcasts in flight (at least one bucket):
// the next ones move while a receiver installs the last.
constexpr int64_t kWeightBytesInFlight = int64_t{256} << 20;
// The trainer's side (rank 0): broadcasts the tensors in order, bucketed; returns when
// every broadcast is done. A bucket of several tensors that lie end to end in memory
// (a trainer's model, laid out in model::weight_send_order) goes as one flat tensor
// over that memory, with no copy; other buckets of several are packed into one ring of buffers in huge pages,
// kept for the next update (as the receivers' ring).
struct SentWeights {
  size_t broadcasts = 0;
  int64_t bytes = 0;
  int64_t copied_bytes = 0;  // of buckets packed into the ring (or a buffer)
};
SentWeights send_weights(ProcessGroup& g, const std::vector<std::pair<std::string, at::Tensor>>& params,
                         int64_t bucket_bytes = 0);
// The engine's side: receives every tensor of `meta` in order (generation may go on
// meanwhile), with the sender's bucket_bytes, and hands each to `take(index, tensor)` in
// the sent dtype and shape as soon as its broadcast is done, while later ones are still
// on their way. The tensor is valid during the call only. Throws rl::Error naming a
// bad dtype or shape; an exception from `take` is rethrown once every broadcast has
// been received (the sender is never left waiting). `into(index)`, where given, may
// name memory for a tensor (valid during the call): a bucket is received there when
// each of its tensors' memory is a contiguous CPU tensor of the sent dtype and number
// of values and, in a bucket of several, starts where the one before it ends (`take`
// then gets views of that memory), else into a buffer. With `into` given, those buffers are one ring (in
// huge pages, kept for the next update: tensor/huge_pages.hpp) reused as soon as `take`
// returns; without, each is a tensor of its own. At most in_flight_bytes (or the
// largest bucket) are in flight.
void receive_weights(ProcessGroup& g, const WeightMeta& meta, int64_t bucket_bytes,
                     const std::function<void(size_t, const at::Tensor&)>& take,
                     const std::function<at::Tensor(size_t)>& into = nullptr,
                     int64_t in_flight_bytes = kWeightBytesInFlight);
// The same, every tensor returned under its name.
std::vector<std::pair<std::string, at::Tensor>> receive_weights(ProcessGroup& g, const WeightMeta& meta,
                                                                int64_t bucket_bytes = 0);

}  // namespace rl::dist
