// net::StaticFiles (what rl.http.serve's static_dir and the trace viewer serve):
// regular files beneath the folder only; NUL bytes, dot segments and symlinks
// that lead outside are refused. Real files and links in a temporary folder.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "base/errors.hpp"
#include "net/static_files.hpp"

namespace fs = std::filesystem;
using rl::net::StaticFiles;

namespace {
void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}
}  // namespace

TEST_CASE("static files: only regular files beneath the folder", "[static_files]") {
  const fs::path tmp = fs::temp_directory_path() / ("rlhost-static-" + std::to_string(::getpid()));
  const fs::path root = tmp / "site", outside = tmp / "secret";
  write(root / "index.html", "<p>home</p>");
  write(root / "x", "the file x");
  write(root / "sub" / "a.js", "let a = 1;");
  write(outside / "key.txt", "SECRET");
  fs::create_symlink(outside / "key.txt", root / "leak.txt");    // absolute link out
  fs::create_symlink("../secret", root / "up");                   // relative directory link out
  fs::create_symlink("sub/a.js", root / "inside.js");             // stays inside: fine
  ::mkfifo((root / "fifo").c_str(), 0600);

  StaticFiles s(root.string(), "/");
  auto get = [&](const std::string& path) { return s.serve("GET", path); };
  REQUIRE(get("/"));
  CHECK(get("/")->body == "<p>home</p>");
  CHECK(get("/")->content_type == "text/html; charset=utf-8");
  CHECK(get("/sub/a.js")->body == "let a = 1;");
  CHECK(get("//sub///a.js")->body == "let a = 1;");
  CHECK(get("/inside.js")->body == "let a = 1;");
  CHECK(get("/x")->content_type == "application/octet-stream");
  CHECK_FALSE(s.serve("POST", "/x"));

  // "x%00.html" decodes to "x\0.html": refused, never served as "x".
  const auto nul = get(std::string("/x\0.html", 8));
  REQUIRE(nul);
  CHECK(nul->status == 400);
  CHECK(nul->body.find("the file x") == std::string::npos);
  for (const char* p : {"/../secret/key.txt", "/sub/../../secret/key.txt", "/./x"}) {
    auto r = get(p);
    REQUIRE(r);
    CHECK(r->status == 400);
  }
  // Links out, a FIFO (would block), a directory without '/', a missing file: not ours (404 or the handler).
  for (const char* p : {"/leak.txt", "/up/key.txt", "/fifo", "/sub", "/nope.html"}) CHECK_FALSE(get(p));

  StaticFiles mounted(root.string(), "/static");
  CHECK(mounted.serve("GET", "/static/x")->body == "the file x");
  CHECK_FALSE(mounted.serve("GET", "/staticx"));
  CHECK_FALSE(mounted.serve("GET", "/x"));
  CHECK_THROWS_WITH(StaticFiles((tmp / "none").string(), "/"), Catch::Contains("not a directory"));
  fs::remove_all(tmp);
}
