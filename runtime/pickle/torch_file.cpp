#include "pickle/torch_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "base/errors.hpp"
#include "pickle/torch_pickle.hpp"
#include "pickle/zip_archive.hpp"

namespace fs = std::filesystem;

namespace rl::pickle {

namespace {

const char* kNotTorch = "expected a file written by torch.save (a zip archive) or rl.dump.save";

std::string serialization_id() {
  std::random_device rd;
  std::mt19937_64 rng((static_cast<uint64_t>(rd()) << 32) ^ rd());
  std::string id;
  while (id.size() < 40) id += std::to_string(rng() % 10000000000ull);
  id.resize(40);
  return id;
}

// The storage type of a persistent id: torch.<Type>Storage, or
// torch.storage.UntypedStorage (bytes; _rebuild_tensor_v3 gives the dtype).
DType storage_dtype(const Value& type, const std::string& where) {
  if (type.is(Value::Kind::global)) {
    const Global& g = type.as_global();
    DType d;
    if (g.module == "torch" && dtype_from_storage_class(g.name, &d)) return d;
    if ((g.module == "torch.storage" || g.module == "torch") && g.name == "UntypedStorage") return DType::uint8;
    throw Error(where + ": unsupported storage type " + g.module + "." + g.name,
                "dumps hold float, int, bool and byte tensors");
  }
  throw Error(where + ": a storage's type is a " + std::string(type.type_name()) + ", not a class", kNotTorch);
}

// The fields of ('storage', type, key, location, numel[, view_metadata]).
struct StorageId {
  DType dtype;
  std::string key;
  int64_t numel;
};
StorageId parse_storage_id(const Value& pid, const std::string& where) {
  if (!pid.is(Value::Kind::tuple) || pid.items().size() < 5 || !pid.items()[0].is(Value::Kind::string) ||
      pid.items()[0].as_string() != "storage")
    throw Error(where + ": unsupported persistent id (a " + std::string(pid.type_name()) + ")",
                "only torch storages are supported");
  const auto& a = pid.items();
  if (!a[2].is(Value::Kind::string) || !a[4].is(Value::Kind::integer) || a[4].as_int() < 0)
    throw Error(where + ": a storage id without a key or element count", kNotTorch);
  if (a.size() > 5 && !a[5].is_none())
    throw Error(where + ": storage views (a legacy torch < 0.4 feature) are not supported", "re-save with a newer torch");
  return {storage_dtype(a[1], where), a[2].as_string(), a[4].as_int()};
}

Tensor storage_tensor(DType dtype, std::shared_ptr<const std::string> bytes) {
  Tensor t;
  t.dtype = dtype;
  t.shape = {static_cast<int64_t>(bytes->size() / dtype_size(dtype))};
  t.stride = {1};
  t.storage = std::move(bytes);
  return t;
}

Value load_zip(std::string_view data, const std::string& where) {
  ZipReader zip(data, where);
  // The pickle sits at <archive>/data.pkl; <archive> is the file's stem at save
  // time, so find it rather than assume it.
  std::string prefix;
  const ZipEntry* pkl = nullptr;
  for (const auto& e : zip.entries()) {
    const auto slash = e.name.find('/');
    if (slash != std::string::npos && e.name.compare(slash, std::string::npos, "/data.pkl") == 0) {
      pkl = &e;
      prefix = e.name.substr(0, slash + 1);
      break;
    }
  }
  if (!pkl) throw Error(where + ": the zip archive has no <archive>/data.pkl", kNotTorch);
  if (const ZipEntry* bo = zip.find(prefix + "byteorder")) {
    if (zip.read(*bo) != "little")
      throw Error(where + ": the dump was written big-endian (byteorder '" + std::string(zip.read(*bo)) + "')",
                  "re-save it on a little-endian machine");
  }
  std::map<std::string, std::shared_ptr<const std::string>> storages;
  const std::string pkl_where = where + ": " + pkl->name;
  auto persistent = [&](const Value& pid) -> Value {
    const StorageId id = parse_storage_id(pid, pkl_where);
    auto it = storages.find(id.key);
    if (it == storages.end()) {
      const std::string name = prefix + "data/" + id.key;
      const ZipEntry* e = zip.find(name);
      if (!e) throw Error(where + ": the pickle refers to storage " + name + ", which is not in the archive", kNotTorch);
      it = storages.emplace(id.key, std::make_shared<const std::string>(zip.read(*e))).first;
    }
    const uint64_t need = static_cast<uint64_t>(id.numel) * dtype_size(id.dtype);
    if (it->second->size() < need)
      throw Error(where + ": storage " + prefix + "data/" + id.key + " holds " + std::to_string(it->second->size()) +
                      " bytes but " + std::to_string(id.numel) + " " + dtype_name(id.dtype) + " elements need " +
                      std::to_string(need),
                  "the file is truncated or corrupt");
    return storage_tensor(id.dtype, it->second);
  };
  size_t pos = 0;
  Value v = pickle_load(zip.read(*pkl), &pos, persistent, pkl_where);
  check_loaded(v, where);
  return v;
}

// torch.save(..., _use_new_zipfile_serialization=False): five pickles and the
// raw storages. Storages come after the object, so the object's tensors get
// placeholders that are filled at the end.
Value load_legacy(std::string_view data, const std::string& where) {
  size_t pos = 0;
  const PersistentLoader none = [&](const Value&) -> Value {
    throw Error(where + ": a persistent id in the header of a legacy torch file", kNotTorch);
  };
  const Value magic = pickle_load(data, &pos, none, where);
  static const std::string kMagic("\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 10);  // 0x1950a86a20f9469cfc6c
  if (!magic.is(Value::Kind::big_integer) || magic.as_big_int().le_bytes != kMagic)
    throw Error(where + ": a pickle, but not a torch.save file (no torch magic number)", kNotTorch);
  const Value protocol = pickle_load(data, &pos, none, where);
  if (!protocol.is(Value::Kind::integer) || protocol.as_int() != 1001)
    throw Error(where + ": unsupported legacy torch protocol", "re-save with a newer torch");
  const Value sys_info = pickle_load(data, &pos, none, where);
  if (const Value* le = sys_info.get("little_endian"); le && le->is(Value::Kind::boolean) && !le->as_bool())
    throw Error(where + ": the dump was written big-endian", "re-save it on a little-endian machine");

  struct Pending {
    DType dtype;
    std::shared_ptr<std::string> bytes;
    int64_t numel;
  };
  std::map<std::string, Pending> pending;
  auto persistent = [&](const Value& pid) -> Value {
    const StorageId id = parse_storage_id(pid, where);
    auto it = pending.find(id.key);
    if (it == pending.end())
      it = pending.emplace(id.key, Pending{id.dtype, std::make_shared<std::string>(), id.numel}).first;
    Tensor t;
    t.dtype = id.dtype;
    t.shape = {id.numel};
    t.stride = {1};
    t.storage = it->second.bytes;
    return t;
  };
  Value v = pickle_load(data, &pos, persistent, where);
  const Value keys = pickle_load(data, &pos, none, where);
  if (!keys.is(Value::Kind::list)) throw Error(where + ": the storage key list is missing", kNotTorch);
  for (const auto& k : keys.items()) {
    if (!k.is(Value::Kind::string)) throw Error(where + ": a storage key is not a string", kNotTorch);
    auto it = pending.find(k.as_string());
    if (it == pending.end()) throw Error(where + ": storage " + k.as_string() + " is listed but never used", kNotTorch);
    if (data.size() - pos < 8) throw Error(where + ": truncated in storage " + k.as_string(), "the file is truncated");
    int64_t count;
    std::memcpy(&count, data.data() + pos, 8);
    pos += 8;
    const uint64_t esize = dtype_size(it->second.dtype);
    if (count < 0 || static_cast<uint64_t>(count) > (data.size() - pos) / esize)
      throw Error(where + ": truncated in storage " + k.as_string(), "the file is truncated");
    it->second.bytes->assign(data.data() + pos, static_cast<size_t>(count) * esize);
    pos += static_cast<size_t>(count) * esize;
  }
  check_loaded(v, where);
  return v;
}

std::string read_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::error_code ec;
    if (!fs::exists(file, ec)) throw Error(file.string() + ": no such file", "check the path (and {rollout_id} in a template)");
    throw Error(file.string() + ": cannot open: " + std::strerror(errno));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(file.string() + ": read error");
  return std::move(ss).str();
}

void write_file_atomically(const fs::path& file, std::string_view bytes) {
  std::error_code ec;
  if (file.has_parent_path()) {
    fs::create_directories(file.parent_path(), ec);
    if (ec) throw Error(file.string() + ": cannot create its directory: " + ec.message());
  }
  const fs::path tmp = file.string() + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_errno(file.string() + ": cannot write");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      errno = err;
      throw_errno(file.string() + ": write failed");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    errno = err;
    throw_errno(file.string() + ": write failed");
  }
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    errno = err;
    throw_errno(file.string() + ": cannot rename the temp file over it");
  }
}

}  // namespace

std::string torch_save_bytes(const Value& v, const std::string& archive_name) {
  std::vector<PickledStorage> storages;
  const std::string pkl = pickle_dump(v, &storages);
  const std::string a = (archive_name.empty() ? "archive" : archive_name) + "/";
  ZipWriter zip;
  zip.add(a + "data.pkl", pkl);
  zip.add(a + ".format_version", "1");
  zip.add(a + ".storage_alignment", "64");
  zip.add(a + "byteorder", "little");
  for (const auto& s : storages) zip.add(a + "data/" + s.key, *s.bytes);
  zip.add(a + "version", "3\n");
  zip.add(a + ".data/serialization_id", serialization_id());
  return zip.finish();
}

void torch_save(const Value& v, const fs::path& file) {
  // torch names the archive after the file's stem ("rollout_3" for rollout_3.pt).
  std::string stem = file.stem().string();
  if (stem.empty() || stem.find('/') != std::string::npos) stem = "archive";
  const std::string bytes = torch_save_bytes(v, stem);
  write_file_atomically(file, bytes);
}

Value torch_load_bytes(std::string_view data, const std::string& where) {
  if (data.empty()) throw Error(where + ": the file is empty", kNotTorch);
  if (looks_like_zip(data)) return load_zip(data, where);
  if (static_cast<unsigned char>(data[0]) == 0x80) return load_legacy(data, where);
  char head[40];
  const auto b = [&](size_t i) { return i < data.size() ? static_cast<unsigned char>(data[i]) : 0u; };
  std::snprintf(head, sizeof head, "%02x %02x %02x %02x", b(0), b(1), b(2), b(3));
  throw Error(where + ": not a torch file (it starts with bytes " + head + ")", kNotTorch);
}

Value torch_load(const fs::path& file) {
  const std::string data = read_file(file);
  return torch_load_bytes(data, file.string());
}

}  // namespace rl::pickle
