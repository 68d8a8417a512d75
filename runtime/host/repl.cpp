#include "host/repl.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

// readline.h needs stdio's FILE declared first.
#include <readline/history.h>
#include <readline/readline.h>

namespace fs = std::filesystem;

namespace rl {

namespace {

// readline keeps one global line handler: at most one Repl drives it.
Repl* g_readline_owner = nullptr;

bool blank(const std::string& s) {
  for (char c : s)
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') return false;
  return true;
}

}  // namespace

std::string Repl::default_history_path(const std::string& name) {
  if (const char* env = std::getenv("RLHOST_HISTORY")) return env;  // "" disables
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg && *xdg)
    return (fs::path(xdg) / "rlhost" / name).string();
  if (const char* home = std::getenv("HOME"); home && *home)
    return (fs::path(home) / ".local" / "state" / "rlhost" / name).string();
  return "";
}

Repl::Repl(EventLoop& loop, Options opts, Callbacks cb)
    : loop_(loop), opts_(std::move(opts)), cb_(std::move(cb)), self_(std::make_shared<Repl*>(this)) {
  readline_ = opts_.allow_readline && isatty(opts_.input_fd) && opts_.input_fd == 0;
}

Repl::~Repl() {
  stop();
  *self_ = nullptr;  // pending done() callbacks now do nothing
}

void Repl::start() {
  if (started_) return;
  started_ = true;
  if (readline_) {
    if (g_readline_owner) throw std::logic_error("Repl: readline is already driven by another REPL");
    g_readline_owner = this;
    rl_readline_name = "rlhost";
    // Our SIGINT handler must stay in place (it interrupts running chunks), so
    // readline must not install its own; window-size changes it may handle.
    rl_catch_signals = 0;
    rl_instream = stdin;
    rl_outstream = stdout;
    // Tab inserts a tab: pasted, indented Lua must not trigger filename completion.
    rl_bind_key('\t', rl_insert);
    open_history();
    if (!opts_.banner.empty()) {
      std::fputs(opts_.banner.c_str(), stdout);
      std::fflush(stdout);
    }
    install_readline(opts_.prompt);
  } else {
    // A pipe or a terminal can be polled; epoll refuses regular files, which
    // never block anyway, so those are read from posted callbacks instead.
    if (opts_.input_fd >= 0) {
      struct stat st {};
      if (fstat(opts_.input_fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISCHR(st.st_mode)) &&
          !isatty(opts_.input_fd))
        fd_pollable_ = false;
    }
    arm_input();
  }
}

void Repl::stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  disarm_input();
  if (readline_) {
    remove_readline();
    if (history_ok_ && opts_.history_size > 0)
      history_truncate_file(opts_.history_path.c_str(), static_cast<int>(opts_.history_size));
    if (g_readline_owner == this) g_readline_owner = nullptr;
  }
}

// ---- readline ----------------------------------------------------------------

void Repl::readline_line_handler(char* line) {
  Repl* self = g_readline_owner;
  if (!self) {
    std::free(line);
    return;
  }
  if (!line) {  // Ctrl-D on an empty line
    std::fputs("\n", stdout);
    std::fflush(stdout);
    self->remove_readline();
    self->eof_ = true;
    self->end_of_input();
    return;
  }
  std::string s(line);
  std::free(line);
  self->save_history_line(s);
  self->on_line(std::move(s));
}

void Repl::install_readline(const std::string& prompt) {
  if (handler_installed_) {
    rl_set_prompt(prompt.c_str());
  } else {
    rl_callback_handler_install(prompt.c_str(), &Repl::readline_line_handler);
    handler_installed_ = true;
  }
  arm_input();
}

void Repl::remove_readline() {
  disarm_input();
  if (handler_installed_) {
    // Restores the terminal to cooked mode so chunk output prints normally.
    rl_callback_handler_remove();
    handler_installed_ = false;
  }
}

void Repl::open_history() {
  if (opts_.history_path.empty()) return;
  std::error_code ec;
  const fs::path p(opts_.history_path);
  if (p.has_parent_path()) {
    fs::create_directories(p.parent_path(), ec);
    if (!ec) ::chmod(p.parent_path().c_str(), 0700);  // history may hold secrets typed by hand
  }
  // append_history() needs an existing file.
  const int fd = ::open(opts_.history_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;  // no history, but the REPL still works
  ::close(fd);
  history_ok_ = true;
  stifle_history(static_cast<int>(opts_.history_size));
  read_history(opts_.history_path.c_str());
}

void Repl::save_history_line(const std::string& line) {
  if (blank(line)) return;
  add_history(line.c_str());
  // Appending each line at once keeps history across crashes and kill -9.
  if (history_ok_) append_history(1, opts_.history_path.c_str());
}

bool Repl::interrupt() {
  if (!started_ || stopped_ || busy_) return false;
  pending_.clear();
  if (readline_) {
    if (!handler_installed_) return true;
    // Drop an incremental search or a half-typed line, then start over.
    // "^C" goes after the typed text, before readline resets the terminal
    // (which may return the cursor to column 0).
    std::fputs("^C\n", stdout);
    std::fflush(stdout);
    rl_callback_sigcleanup();
    rl_free_line_state();
    remove_readline();
    install_readline(opts_.prompt);
  } else {
    inbuf_.clear();
  }
  return true;
}

// ---- lines and chunks ---------------------------------------------------------

void Repl::on_line(std::string line) {
  if (stopped_) return;
  if (pending_.empty() && blank(line)) return;  // a bare Enter shows a new prompt
  if (!pending_.empty()) pending_ += '\n';
  pending_ += line;
  if (cb_.incomplete && cb_.incomplete(pending_)) {
    if (readline_) install_readline(opts_.continuation_prompt);
    return;
  }
  std::string chunk = std::move(pending_);
  pending_.clear();
  eval_chunk(std::move(chunk));
}

void Repl::eval_chunk(std::string chunk) {
  busy_ = true;
  if (readline_)
    remove_readline();
  else
    disarm_input();
  std::weak_ptr<Repl*> weak = self_;
  EventLoop* loop = &loop_;
  bool called = false;
  cb_.eval(chunk, [weak, loop, called]() mutable {
    if (called) return;  // done() twice is a caller bug; ignore the second
    called = true;
    // Never continue inside done(): the evaluator may be deep in its own
    // call stack (for rlhost, inside the Lua scheduler).
    loop->post([weak] {
      if (auto p = weak.lock(); p && *p) (*p)->finish_eval();
    });
  });
}

void Repl::finish_eval() {
  busy_ = false;
  if (stopped_) return;
  std::fflush(stdout);
  if (readline_) {
    if (eof_) return end_of_input();
    install_readline(opts_.prompt);
    return;
  }
  drain_plain_lines();
  if (busy_ || stopped_) return;
  if (eof_) return end_of_input();
  arm_input();
}

void Repl::end_of_input() {
  if (busy_ || stopped_) return;
  if (!pending_.empty()) {
    // Input ended inside an unfinished chunk: evaluate it so its syntax error
    // is reported instead of silently dropped.
    std::string chunk = std::move(pending_);
    pending_.clear();
    eval_chunk(std::move(chunk));
    return;
  }
  disarm_input();
  std::weak_ptr<Repl*> weak = self_;
  loop_.post([weak] {
    auto p = weak.lock();
    if (!p || !*p) return;
    Repl* self = *p;
    if (self->stopped_) return;
    self->stop();
    if (self->cb_.on_eof) self->cb_.on_eof();
  });
}

// ---- plain (non-terminal) input -------------------------------------------------

void Repl::arm_input() {
  if (watching_ || stopped_ || opts_.input_fd < 0) return;
  if (readline_) {
    loop_.watch(opts_.input_fd, EPOLLIN, [this](uint32_t) {
      if (handler_installed_) rl_callback_read_char();
    });
    watching_ = true;
    return;
  }
  if (fd_pollable_) {
    try {
      loop_.watch(opts_.input_fd, EPOLLIN, [this](uint32_t) { read_plain(); });
      watching_ = true;
      return;
    } catch (const std::exception&) {
      fd_pollable_ = false;  // e.g. EPERM for a file type epoll cannot watch
    }
  }
  watching_ = true;
  std::weak_ptr<Repl*> weak = self_;
  loop_.post([weak] {
    auto p = weak.lock();
    if (!p || !*p) return;
    Repl* self = *p;
    if (!self->watching_) return;
    self->watching_ = false;
    self->read_plain();
    if (!self->busy_ && !self->eof_ && !self->stopped_) self->arm_input();
  });
}

void Repl::disarm_input() {
  if (!watching_) return;
  watching_ = false;
  if (fd_pollable_ || readline_) loop_.unwatch(opts_.input_fd);
}

void Repl::read_plain() {
  if (stopped_ || busy_) return;
  char buf[65536];
  const ssize_t n = ::read(opts_.input_fd, buf, sizeof buf);
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR) return;
    eof_ = true;  // unreadable input ends the REPL like EOF
  } else if (n == 0) {
    eof_ = true;
  } else {
    inbuf_.append(buf, static_cast<size_t>(n));
  }
  if (eof_ && !inbuf_.empty() && inbuf_.back() != '\n') inbuf_ += '\n';  // last line without newline
  drain_plain_lines();
  if (busy_ || stopped_) return;
  if (eof_) end_of_input();
}

void Repl::drain_plain_lines() {
  while (!busy_ && !stopped_) {
    const auto nl = inbuf_.find('\n');
    if (nl == std::string::npos) return;
    std::string line = inbuf_.substr(0, nl);
    inbuf_.erase(0, nl + 1);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    on_line(std::move(line));
  }
}

}  // namespace rl
