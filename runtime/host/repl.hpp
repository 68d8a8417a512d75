// A line-oriented read-eval-print loop on the process event loop. It knows
// nothing of Lua: the host (bindings/host_session.cpp) and `rlhost attach`
// (host/attach_client.cpp) plug in what "incomplete" and "evaluate" mean.
//
// On a terminal it uses GNU readline's callback interface, so reading a line
// never blocks the loop: tasks spawned earlier keep running while the user
// types. Evaluation is asynchronous too: the prompt comes back only when the
// evaluator calls done(), and stdin is not read meanwhile (type-ahead stays in
// the terminal's buffer, as in any shell).
//
// When the input is not a terminal (a pipe or a file: tests, scripts) lines are
// read without readline and without prompts, so output holds only results.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "base/event_loop.hpp"

namespace rl {

class Repl {
 public:
  struct Options {
    std::string prompt = "> ";
    std::string continuation_prompt = ">> ";
    std::string banner;          // printed once at start, on a terminal only
    std::string history_path;    // "" = no history file
    size_t history_size = 1000;  // lines kept in the file
    int input_fd = 0;
    bool allow_readline = true;  // false forces plain line reading even on a tty
  };

  // Called (later, from the loop) when evaluation of a chunk has finished.
  using Done = std::function<void()>;

  struct Callbacks {
    // True when `chunk` is a prefix of valid code (e.g. an unclosed `function`):
    // the REPL then reads another line with the continuation prompt.
    std::function<bool(const std::string& chunk)> incomplete;
    // Evaluates `chunk` and prints what it wants; must call done() exactly once,
    // at any time and from any call depth (the REPL resumes on a later loop
    // iteration, never inside done()).
    std::function<void(const std::string& chunk, Done done)> eval;
    // End of input (Ctrl-D, or EOF on a pipe) once nothing is being evaluated.
    std::function<void()> on_eof;
  };

  Repl(EventLoop& loop, Options opts, Callbacks cb);
  ~Repl();
  Repl(const Repl&) = delete;
  Repl& operator=(const Repl&) = delete;

  void start();
  void stop();  // idempotent; restores the terminal and saves history

  bool running() const { return started_ && !stopped_; }
  bool busy() const { return busy_; }           // a chunk is being evaluated
  bool uses_readline() const { return readline_; }

  // Ctrl-C while idle: forget the current line and any continuation lines and
  // show a fresh prompt. Returns false (and does nothing) while a chunk runs:
  // then the caller interrupts the chunk instead.
  bool interrupt();

  // $RLHOST_HISTORY ("" disables), else $XDG_STATE_HOME/rlhost/<name>, else
  // ~/.local/state/rlhost/<name>; "" when none can be determined.
  static std::string default_history_path(const std::string& name = "history");

 private:
  void on_line(std::string line);            // one complete input line
  void eval_chunk(std::string chunk);
  void finish_eval();
  void end_of_input();

  // readline mode
  static void readline_line_handler(char* line);
  void install_readline(const std::string& prompt);
  void remove_readline();
  void open_history();
  void save_history_line(const std::string& line);

  // plain mode
  void arm_input();
  void disarm_input();
  void read_plain();
  void drain_plain_lines();

  EventLoop& loop_;
  Options opts_;
  Callbacks cb_;
  bool readline_ = false;
  bool started_ = false;
  bool stopped_ = false;
  bool busy_ = false;
  bool eof_ = false;                 // input ended (plain mode), or Ctrl-D
  bool watching_ = false;
  bool fd_pollable_ = true;          // epoll refuses regular files and /dev/null
  bool handler_installed_ = false;
  bool history_ok_ = false;
  std::string pending_;              // lines of an incomplete chunk
  std::string inbuf_;                // plain mode: bytes read, not yet a line
  // Shared with done() callbacks so a late done() after destruction is harmless.
  std::shared_ptr<Repl*> self_;
};

}  // namespace rl
