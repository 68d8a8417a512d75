// Where control sockets live and how live rlhost processes find each other.
//
// Every rlhost with a control socket writes a record `<pid>.json` into the
// per-user runtime directory ($XDG_RUNTIME_DIR/rlhost, else /tmp/rlhost-<uid>,
// always mode 0700). `rlhost attach --list` reads these records; the socket
// itself is `<pid>.sock` in the same directory unless `--control PATH` put it
// elsewhere (the record then names it). Records of dead processes are stale:
// listing removes them, with their sockets and token files.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace rl::control {

// $XDG_RUNTIME_DIR/rlhost, else /tmp/rlhost-<uid>. Does not create it.
std::string runtime_dir();
// runtime_dir(), created with mode 0700 when missing. Refuses (throws rl::Error)
// a directory owned by another user or a symlink, and tightens our own to 0700:
// in a shared /tmp nobody else may plant or read sockets there.
std::string ensure_runtime_dir();
// `runtime_dir()/<pid>.sock`
std::string default_socket_path(int pid);

struct ProcessRecord {
  int pid = 0;
  std::string script;                // recipe path, "" for a bare REPL
  std::vector<std::string> argv;
  std::string started_at;            // ISO 8601, UTC
  std::string cwd;
  std::string socket;                // Unix socket path, "" when none
  int tcp_port = 0;                  // 0 when no TCP listener
  std::string token_file;            // for TCP, "" when none
  std::string version;
  std::string record_path;           // the .json file it was read from
};

nlohmann::json record_to_json(const ProcessRecord& r);
std::optional<ProcessRecord> read_record(const std::string& path);

// Writes `content` to `path` with mode 0600, atomically (temp file + rename),
// so a reader never sees half a record. Throws rl::Error.
void write_private_file(const std::string& path, const std::string& content);

// True when a process with this pid exists (ours or not).
bool pid_alive(int pid);

// Connects a blocking Unix stream socket to `path`. Returns the fd, or -1 with
// errno set (ENOENT: no socket; ECONNREFUSED: nobody listening).
int connect_unix(const std::string& path);

// Records of live processes, by pid. With clean_stale, removes records, sockets
// and token files of processes that are gone (or whose socket refuses).
std::vector<ProcessRecord> list_processes(bool clean_stale);

// Current time as ISO 8601 UTC ("2024-05-01T12:00:00Z").
std::string iso_time_now();

}  // namespace rl::control
