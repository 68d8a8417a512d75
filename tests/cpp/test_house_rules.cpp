// The house rules of docs/conventions.md, checked on the source tree rather than left to
// review: runtime/ knows nothing of Lua (no Lua header, nothing from bindings/); LibTorch
// headers only in runtime's LibTorch folders and the torch_* bindings; runtime folders
// without LibTorch (linked into the binary) include nothing from those folders; Arrow and
// protobuf stay inside the modules that load them (Parquet, Tinker wire); no include cycle
// between runtime folders; and no test, benchmark or script reads
// the workplace's shared folder beside the checkout (the suite's data is tests/data,
// so a clone stands alone).
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const fs::path kRoot = RLHOST_TEST_SOURCE_DIR;

// runtime/ folders whose files may include LibTorch (the CMake target rlhost_torch_rt).
const std::set<std::string> kTorchAreas = {"tensor", "nn", "engine", "trainer", "dist", "profile"};

struct Include {
  std::string file;  // relative to the source root
  int line;
  std::string target;  // what is between the quotes or angle brackets
  bool angled;
};

std::string rel_path(const fs::path& p) { return fs::relative(p, kRoot).generic_string(); }

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

bool has_ext(const fs::path& p, std::initializer_list<const char*> exts) {
  for (const char* e : exts)
    if (p.extension() == e) return true;
  return false;
}

// Every file under root/dir (recursively) for which keep(path) holds, sorted.
std::vector<fs::path> files_under(const std::string& dir, const std::function<bool(const fs::path&)>& keep) {
  std::vector<fs::path> out;
  const fs::path base = kRoot / dir;
  if (!fs::exists(base)) return out;
  if (fs::is_regular_file(base)) return keep(base) ? std::vector<fs::path>{base} : out;
  for (const auto& e : fs::recursive_directory_iterator(base))
    if (e.is_regular_file() && keep(e.path())) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<fs::path> cxx_files(const std::string& dir) {
  return files_under(dir, [](const fs::path& p) { return has_ext(p, {".cpp", ".hpp", ".h", ".inc", ".cc"}); });
}

std::vector<Include> includes_of(const std::string& dir) {
  static const std::regex inc(R"(^\s*#\s*include\s*([<"])([^>"]+)[>"])");
  std::vector<Include> out;
  for (const auto& p : cxx_files(dir)) {
    std::istringstream in(read_file(p));
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      std::smatch m;
      if (std::regex_search(line, m, inc)) out.push_back({rel_path(p), n, m[2].str(), m[1].str() == "<"});
    }
  }
  return out;
}

// "runtime/engine/server.cpp" -> "engine"; the folder an include names ("engine/x.hpp" -> "engine").
std::string area_of(const std::string& rel) {
  const auto a = rel.find('/'), b = rel.find('/', a + 1);
  return rel.substr(a + 1, b - a - 1);
}
std::string first_dir(const std::string& target) {
  const auto s = target.find('/');
  return s == std::string::npos ? "" : target.substr(0, s);
}

bool is_lua_header(const std::string& t) {
  static const std::set<std::string> names = {"lua.h", "lua.hpp", "lualib.h", "lauxlib.h", "luaconf.h", "luajit.h"};
  return names.count(fs::path(t).filename().string()) > 0 || t.rfind("luajit", 0) == 0;
}
bool is_torch_header(const Include& i) {
  static const std::regex torch(R"(^(torch|ATen|c10|c10d|caffe2)/)");
  return (i.angled && std::regex_search(i.target, torch)) || i.target == "tensor/torch_pch.hpp";
}

// A line naming the shared folder beside the checkout as a place to read from.
// Citations of its design references (its reference/ folder) in prose are allowed; any
// other path into it, or its data folder spelled any way, is not.
bool names_shared(const std::string& line) {
  static const std::regex bad(R"((\.\./shared(?!/reference/))|(shared/data)|(SHARED_DATA)|(["']shared["']))");
  return std::regex_search(line, bad);
}

std::string where(const Include& i) { return i.file + ":" + std::to_string(i.line) + " includes " + i.target; }

std::set<std::string> runtime_areas() {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(kRoot / "runtime"))
    if (e.is_directory()) out.insert(e.path().filename().string());
  return out;
}

}  // namespace

TEST_CASE("house: the checks see the tree and catch what they look for", "[house]") {
  REQUIRE(fs::exists(kRoot / "runtime" / "base"));
  REQUIRE(includes_of("runtime").size() > 100);
  CHECK(is_lua_header("lua.hpp"));
  CHECK(is_lua_header("luajit-2.1/lauxlib.h"));
  CHECK_FALSE(is_lua_header("base/log.hpp"));
  CHECK(is_torch_header({"x", 1, "ATen/Parallel.h", true}));
  CHECK(is_torch_header({"x", 1, "tensor/torch_pch.hpp", false}));
  CHECK_FALSE(is_torch_header({"x", 1, "tensor/torch_env.hpp", false}));
  const std::string up = "..";
  CHECK(names_shared("local d = \"" + up + "/shared/data\""));
  CHECK(names_shared("data=\"${RLHOST_" + std::string("SHARED_DATA") + ":-x}\""));
  CHECK(names_shared("os.path.join(root, \"..\", \"" + std::string("shared") + "\", \"data\")"));
  CHECK(names_shared("cat " + up + "/shared/seeds/x"));
  CHECK_FALSE(names_shared("// see " + up + "/shared/reference/slime_behaviour.md"));
  CHECK_FALSE(names_shared("std::shared_ptr<int> shared_weights;"));
}

TEST_CASE("house: runtime/ includes no Lua header and nothing from bindings/", "[house]") {
  std::vector<std::string> bad;
  for (const auto& i : includes_of("runtime"))
    if (is_lua_header(i.target) || first_dir(i.target) == "bindings") bad.push_back(where(i));
  INFO("runtime/ knows nothing of Lua; bindings/ (or app/, above both) is where the two meet");
  for (const auto& b : bad) FAIL_CHECK(b);
  CHECK(bad.empty());
}

TEST_CASE("house: LibTorch headers only in runtime's LibTorch folders, bindings/torch_* and tests/cpp/torch", "[house]") {
  std::vector<std::string> bad;
  for (const std::string dir : {"runtime", "bindings", "app", "tests/cpp"}) {
    for (const auto& i : includes_of(dir)) {
      if (!is_torch_header(i)) continue;
      const bool ok = dir == "runtime"     ? kTorchAreas.count(area_of(i.file)) > 0
                      : dir == "bindings"  ? fs::path(i.file).filename().string().rfind("torch_", 0) == 0
                      : dir == "tests/cpp" ? i.file.rfind("tests/cpp/torch/", 0) == 0
                                           : false;
      if (!ok) bad.push_back(where(i));
    }
  }
  INFO("files that include LibTorch live in runtime/{tensor,nn,engine,trainer,dist,profile}/ (docs/conventions.md)");
  for (const auto& b : bad) FAIL_CHECK(b);
  CHECK(bad.empty());
}

TEST_CASE("house: what the binary links includes nothing from runtime's LibTorch folders", "[house]") {
  // runtime/model, net, router, ... and the core bindings go into the binary, which
  // does not link LibTorch: a header from a LibTorch folder would pull it in.
  std::vector<std::string> bad;
  for (const std::string dir : {"runtime", "bindings", "app"}) {
    for (const auto& i : includes_of(dir)) {
      if (i.angled || !kTorchAreas.count(first_dir(i.target))) continue;
      const bool linked_into_binary = dir == "runtime"    ? !kTorchAreas.count(area_of(i.file))
                                      : dir == "bindings" ? fs::path(i.file).filename().string().rfind("torch_", 0) != 0
                                                          : true;
      if (linked_into_binary) bad.push_back(where(i));
    }
  }
  for (const auto& b : bad) FAIL_CHECK(b);
  CHECK(bad.empty());
}

TEST_CASE("house: Arrow headers only in runtime/data's sources; only bindings/parquet_* use runtime/data", "[house]") {
  // runtime/data is the Parquet module's (librlhost_parquet.so, built only where Arrow is
  // found): its headers hide Arrow, and nothing the binary links includes them.
  static const std::regex arrow(R"(^(arrow|parquet)/)");
  std::vector<std::string> bad;
  for (const std::string dir : {"runtime", "bindings", "app", "tests/cpp"}) {
    for (const auto& i : includes_of(dir)) {
      const bool in_data = i.file.rfind("runtime/data/", 0) == 0;
      if (i.angled && std::regex_search(i.target, arrow) && !(in_data && fs::path(i.file).extension() == ".cpp"))
        bad.push_back(where(i));
      if (!i.angled && first_dir(i.target) == "data" && !in_data &&
          fs::path(i.file).filename().string().rfind("parquet_", 0) != 0)
        bad.push_back(where(i));
    }
  }
  for (const auto& b : bad) FAIL_CHECK(b);
  CHECK(bad.empty());
}

TEST_CASE("house: protobuf headers only in runtime/tinker's sources; only bindings/tinker_* use runtime/tinker", "[house]") {
  // runtime/tinker is the Tinker wire module's (librlhost_tinker.so, built only where
  // Protocol Buffers are found): wire.hpp hides libprotobuf and the generated classes,
  // and nothing the binary links includes them. Its Catch2 tests may use both.
  static const std::regex protobuf(R"(^google/protobuf/|\.pb\.h$)");
  std::vector<std::string> bad;
  for (const std::string dir : {"runtime", "bindings", "app", "tests/cpp"}) {
    for (const auto& i : includes_of(dir)) {
      const bool in_tinker = i.file.rfind("runtime/tinker/", 0) == 0;
      const bool tinker_test = i.file.rfind("tests/cpp/tinker/", 0) == 0;
      if (std::regex_search(i.target, protobuf) && !tinker_test && !(in_tinker && fs::path(i.file).extension() == ".cpp"))
        bad.push_back(where(i));
      if (!i.angled && first_dir(i.target) == "tinker" && !in_tinker && !tinker_test &&
          fs::path(i.file).filename().string().rfind("tinker_", 0) != 0)
        bad.push_back(where(i));
    }
  }
  for (const auto& b : bad) FAIL_CHECK(b);
  CHECK(bad.empty());
}

TEST_CASE("house: no include cycle between runtime folders", "[house]") {
  const std::set<std::string> areas = runtime_areas();
  std::map<std::string, std::map<std::string, std::string>> edges;  // from -> to -> an include that makes it
  for (const auto& i : includes_of("runtime")) {
    const std::string from = area_of(i.file), to = first_dir(i.target);
    if (i.angled || to.empty() || to == from || !areas.count(to)) continue;
    edges[from].emplace(to, where(i));
  }
  // Depth-first search; a back edge closes a cycle, reported with the includes along it.
  std::map<std::string, int> state;  // 0 new, 1 on the stack, 2 done
  std::vector<std::string> stack, cycles;
  std::function<void(const std::string&)> visit = [&](const std::string& a) {
    state[a] = 1;
    stack.push_back(a);
    for (const auto& [b, why] : edges[a]) {
      if (state[b] == 1) {
        std::string c;
        auto it = std::find(stack.begin(), stack.end(), b);
        for (; it != stack.end(); ++it) {
          const std::string next = std::next(it) == stack.end() ? b : *std::next(it);
          c += "\n  " + edges[*it][next];
        }
        cycles.push_back(b + " -> ... -> " + b + ":" + c);
      } else if (state[b] == 0) {
        visit(b);
      }
    }
    stack.pop_back();
    state[a] = 2;
  };
  for (const auto& a : areas)
    if (state[a] == 0) visit(a);
  for (const auto& c : cycles) FAIL_CHECK(c);
  CHECK(cycles.empty());
  CHECK(edges["engine"].count("trainer") == 0);  // both use runtime/dist/
  CHECK(edges["trainer"].count("engine") == 0);
}

TEST_CASE("house: no test, benchmark or script reads the shared folder beside the checkout", "[house]") {
  // The suite's data is tests/data (unpacked into <build>/test-data).
  std::vector<std::string> found;
  const auto code = [](const fs::path& p) {
    const std::string name = p.filename().string();
    return has_ext(p, {".cpp", ".hpp", ".h", ".lua", ".py", ".sh", ".cmake", ".js", ".html"}) ||
           name == "CMakeLists.txt" || p.extension().empty();
  };
  for (const std::string dir : {"tests", "bench", "scripts", ".ci", "cmake", "CMakeLists.txt", "recipes", "tools", "lua"}) {
    for (const auto& p : files_under(dir, code)) {
      if (p.filename() == "test_house_rules.cpp") continue;  // this file spells the patterns out
      if (rel_path(p).rfind("tests/data/", 0) == 0 && p.extension().empty()) continue;
      std::istringstream in(read_file(p));
      std::string line;
      for (int n = 1; std::getline(in, line); ++n)
        if (names_shared(line)) found.push_back(rel_path(p) + ":" + std::to_string(n) + ": " + line);
    }
  }
  INFO("a clone must run the whole suite with nothing beside it: put data in tests/data (tests/data/README.md)");
  for (const auto& f : found) FAIL_CHECK(f);
  CHECK(found.empty());
}
