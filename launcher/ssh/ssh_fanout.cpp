#include "launcher/ssh/ssh_fanout.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <list>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include "agent/output/console_sink.h"
#include "agent/output/line_assembler.h"
#include "agent/spec/exit_status.h"
#include "launcher/ssh/remote_command.h"
#include "launcher/ssh/ssh_host.h"
#include "launcher/ssh/ssh_process.h"
#include "launcher/ssh/summary_merge.h"
#include "rendezvous/base/exit_codes.h"
#include "rendezvous/base/number_parse.h"
#include "rendezvous/base/printable.h"

// Completion handlers here do not throw: every failure becomes a line on
// stderr and an exit code.
namespace dtrun::launcher {
namespace asio = boost::asio;
namespace {

using host = fanout_host;
using host_stream = fanout_stream;

class fanout {
 public:
  explicit fanout(const fanout_options& options)
      : options_(options), signals_(io_), deadline_(io_), out_(io_, STDOUT_FILENO),
        err_(io_, STDERR_FILENO) {}

  int run() {
    // A host's stdin pipe that broke (its ssh is gone) must not kill us.
    ::signal(SIGPIPE, SIG_IGN);
    signals_.add(SIGCHLD);
    for (int sig : options_.signals) {
      // As the agent: a signal ignored when we started (nohup, `cmd &`)
      // stays ignored, so a hang-up does not stop a nohup'ed job.
      if (!ignored_at_start(sig)) signals_.add(sig);
    }
    wait_for_signal();
    start_more();
    // Our own lines are written on the loop, so it runs even when nothing
    // started.
    if (all_finished()) stop_waiting_for_signals();
    io_.run();
    finish_summary();
    return exit_code();
  }

 private:
  // Starts hosts in plan order while fewer than max_connecting are being
  // set up; called again each time one is set up or ends. Nothing more
  // starts once the job is stopping (a signal, or a host failed: the
  // others could not complete the rendezvous without it).
  void start_more() {
    const std::size_t slots = std::max<std::size_t>(options_.max_connecting, 1);
    while (next_ < options_.plan.size() && connecting_ < slots && !launch_failure_ &&
           !stopping_) {
      start(options_.plan[next_++]);
    }
  }

  // `h` is set up (its agent runs) or gone: its slot goes to the next host.
  void set_up(host& h) {
    if (!h.connecting) return;
    h.connecting = false;
    --connecting_;
    if (h.setup_deadline) h.setup_deadline->cancel();
    start_more();
  }

  // A host whose agent has not started setup_timeout after its ssh did
  // (a login that hangs, an ssh that waits for a prompt) fails the launch:
  // the other hosts would wait for it (or for the rendezvous port it was
  // to report) for ever.
  void watch_setup(host& h) {
    h.setup_deadline.emplace(io_);
    h.setup_deadline->expires_after(options_.setup_timeout);
    h.setup_deadline->async_wait([this, &h](const boost::system::error_code& ec) {
      if (ec || !h.connecting || h.status || stopping_) return;
      say_error(fmt::format(
          "host {}: dtrun did not start there within {} s of ssh starting (the login or ssh "
          "hangs?); check that 'ssh {} true' returns at once without a prompt (BatchMode)",
          h.launch.host.target, options_.setup_timeout.count() / 1000.0, h.launch.host.target));
      launch_failed(1);
    });
  }

  void start(const host_launch& launch) {
    auto h = std::make_unique<host>();
    h->launch = launch;
    h->prefix = launch.host.target + ": ";
    ssh_pipe in = make_ssh_pipe();
    ssh_pipe out = make_ssh_pipe();
    ssh_pipe err = make_ssh_pipe();
    spawned_ssh s = spawn_ssh(launch.ssh_argv, in.read, out.write, err.write);
    for (int fd : {in.read, out.write, err.write}) ::close(fd);
    if (s.error != 0) {
      for (int fd : {in.write, out.read, err.read}) ::close(fd);
      say_error(fmt::format("cannot start '{}' for host {}: {}; install openssh-client or name "
                            "the command with --ssh",
                            launch.ssh_argv[0], launch.host.target, std::strerror(s.error)));
      launch_failed(s.error == ENOENT ? exit_not_found : exit_not_executable);
      return;
    }
    h->pid = s.pid;
    h->connecting = true;
    ++connecting_;
    watch_setup(*h);
    // Ours alone (not the shell's), so non-blocking is safe: a stuck ssh
    // must not block the loop when we write a signal line.
    ::fcntl(in.write, F_SETFL, ::fcntl(in.write, F_GETFL) | O_NONBLOCK);
    h->stdin_fd = in.write;
    // Started after the first host reported the port: it waits in the
    // pipe until the agent reads it.
    if (launch.port == port_role::read && port_) {
      write_line(*h, std::to_string(*port_));
      h->port_sent = true;
    }
    h->out.pipe.emplace(io_, out.read);
    h->err.pipe.emplace(io_, err.read);
    host* raw = h.get();
    hosts_.push_back(std::move(h));
    read(*raw, raw->out, true);
    read(*raw, raw->err, false);
  }

  // --- output -------------------------------------------------------------

  void read(host& h, host_stream& s, bool is_stdout) {
    s.pipe->async_read_some(asio::buffer(s.buffer), [this, &h, &s, is_stdout](
                                                         const boost::system::error_code& ec,
                                                         std::size_t n) {
      std::string text;
      if (ec) {
        s.lines.finish(text);
      } else {
        s.lines.feed(std::string_view(s.buffer.data(), n), text);
      }
      take_lines(h, s, is_stdout, text);
      auto next = [this, &h, &s, is_stdout, ended = static_cast<bool>(ec)] {
        s.pending.clear();
        if (!ended) {
          read(h, s, is_stdout);
          return;
        }
        s.eof = true;
        s.pipe->close();
        check_finished(h);
      };
      if (s.pending.empty()) {
        next();
      } else {
        (is_stdout ? out_ : err_).write(s.pending, next);
      }
    });
  }

  // Whole lines (each ends in '\n') -> s.pending, prefixed, except what is
  // ours: the rendezvous port and the failure summary.
  void take_lines(host& h, host_stream& s, bool is_stdout, const std::string& text) {
    std::size_t start = 0;
    while (start < text.size()) {
      std::size_t end = text.find('\n', start);
      std::string_view line(text.data() + start, end - start);
      start = end + 1;
      if (is_stdout && h.connecting && line == agent_started_line) {
        set_up(h);
        continue;
      }
      if (is_stdout && h.launch.port == port_role::report && !port_ && take_port(h, line)) {
        continue;
      }
      if (!is_stdout && h.take_summary_line(line)) continue;
      if (!is_stdout) {
        // ssh ends its own messages with "\r\n".
        h.last_line = line.substr(0, line.find_last_not_of('\r') + 1);
      }
      s.pending += h.prefix;
      s.pending += line;
      s.pending += '\n';
    }
  }

  bool take_port(host& h, std::string_view line) {
    std::string_view prefix = rdzv_port_line_prefix;
    if (line.rfind(prefix, 0) != 0) return false;
    try {
      port_ = static_cast<int>(parse_integer(line.substr(prefix.size()), "rendezvous port", 1,
                                             max_port));
    } catch (const std::exception& e) {
      say_error(fmt::format("host {} reported a bad rendezvous port: {}", h.launch.host.target,
                            e.what()));
      launch_failed(1);
      return true;
    }
    if (stop_signal_ != 0 || launch_failure_) return true;  // the others are stopping
    for (auto& other : hosts_) {
      if (other->launch.port != port_role::read || other->stdin_fd < 0) continue;
      write_line(*other, std::to_string(*port_));
      other->port_sent = true;
    }
    return true;
  }

  // --- processes ----------------------------------------------------------

  void wait_for_signal() {
    signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
      if (ec || !waiting_for_signals_) return;
      wait_for_signal();
      if (sig == SIGCHLD) {
        reap();
      } else {
        on_signal(sig);
      }
    });
  }

  // The loop ends when nothing is left to wait for. cancel() alone cannot
  // guarantee that: it does not recall a wait that has already completed,
  // and two SIGCHLDs close together (hosts leave the exit barrier at once)
  // complete the re-armed wait at once; its handler, run after the last
  // host finished, would wait again, for a signal that never comes (a hang
  // seen once in CI). So a handler that runs after this does nothing.
  void stop_waiting_for_signals() {
    waiting_for_signals_ = false;
    signals_.cancel();
  }

  // Signals coalesce: reap every exited child.
  // By index: set_up() may start hosts, growing hosts_ under the loop.
  void reap() {
    for (std::size_t i = 0; i < hosts_.size(); ++i) {
      host* h = hosts_[i].get();
      if (h->status || h->pid < 0) continue;
      int status = 0;
      pid_t r = ::waitpid(h->pid, &status, WNOHANG);
      if (r != h->pid) continue;
      h->status = agent::decode_wait_status(status);
      close_stdin(*h);
      // ssh ended well, but dtrun never said it started there: nothing
      // ran on that host (a remote shell that ignores the command, an ssh
      // wrapper that exits 0, a dtrun older than the start line).
      if (h->connecting && h->status->code == 0 && h->status->signal == 0 && !stopping_ &&
          !launch_failure_) {
        say_error(fmt::format(
            "host {}: ssh ended (exit 0) before dtrun started there; check that 'ssh {} {} "
            "--version' runs dtrun of this version, or name it with --remote-dtrun",
            h->launch.host.target, h->launch.host.target, options_.remote_dtrun));
        launch_failed(1);
      }
      check_finished(*h);
      set_up(*h);
    }
  }

  void check_finished(host& h) {
    if (h.done || !h.finished()) return;
    h.done = true;
    if (h.block) {
      // Cut off inside a summary (the connection dropped): show what came.
      std::string text;
      for (const auto& line : *h.block) text += h.prefix + line + "\n";
      h.block.reset();
      say_raw(std::move(text));
    }
    int code = h.status->code;
    if (code != 0 && h.blocks.empty() && stop_signal_ == 0 && !launch_failure_) {
      say_error(h.describe_failure(code, options_.remote_dtrun));
      launch_failed(code);
    }
    finish_if_all_done();
  }

  void finish_if_all_done() {
    if (!all_finished()) return;
    deadline_.cancel();
    stop_waiting_for_signals();
    // The console writes already queued still complete on the loop.
  }

  // Every started host is done, and no host is left to start (or none
  // will be: the job is stopping).
  bool all_finished() const {
    if (next_ < options_.plan.size() && !launch_failure_ && !stopping_) return false;
    for (const auto& h : hosts_) {
      if (!h->done) return false;
    }
    return true;
  }

  // A host failed to start or lost its agent: the others cannot complete
  // the rendezvous without it, so they are stopped.
  void launch_failed(int code) {
    if (!launch_failure_) launch_failure_ = code;
    stop_hosts(SIGTERM, "stopping the other hosts");
  }

  void on_signal(int sig) {
    if (sig == SIGUSR1 || sig == SIGUSR2) {
      for (auto& h : hosts_) {
        if (h->stdin_fd >= 0 && port_sent_or_not_needed(*h)) write_line(*h, agent::signal_name(sig));
      }
      return;
    }
    if (stop_signal_ == 0) stop_signal_ = sig;
    stop_hosts(sig, fmt::format("received {}; stopping every host", agent::signal_name(sig)));
  }

  bool port_sent_or_not_needed(const host& h) const {
    return h.launch.port != port_role::read || h.port_sent;
  }

  // Forwards `sig` to every host's agent (two-phase stop there: the signal,
  // then SIGKILL after its --stop-timeout). A host still waiting for the
  // rendezvous port has no agent yet: its stdin is closed, and it exits.
  // A second call forwards again, which the agents take as "now".
  void stop_hosts(int sig, const std::string& why) {
    if (!options_.quiet && !stopping_) say_info(why);
    for (auto& h : hosts_) {
      // No agent there yet to stop its workers: end the connection now
      // (an agent that was just starting sees it close and stops).
      if (h->connecting && !h->status && h->pid > 0) ::kill(-h->pid, SIGKILL);
      if (h->stdin_fd < 0) continue;
      if (port_sent_or_not_needed(*h)) {
        write_line(*h, agent::signal_name(sig));
      } else {
        close_stdin(*h);
      }
    }
    if (stopping_) return;
    stopping_ = true;
    // The hosts not started yet never will be; those started may all be
    // done already.
    finish_if_all_done();
    if (all_finished()) return;
    deadline_.expires_after(options_.stop_timeout + options_.teardown_margin);
    deadline_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      for (auto& h : hosts_) {
        if (h->status || h->pid < 0) continue;
        say_error(fmt::format("host {} still connected {} ms after the stop; closing its ssh "
                              "connection (its agent stops its workers when it sees that)",
                              h->launch.host.target,
                              (options_.stop_timeout + options_.teardown_margin).count()));
        ::kill(-h->pid, SIGKILL);
      }
    });
  }

  void write_line(host& h, const std::string& text) {
    std::string line = text + "\n";
    // A few bytes into an empty-enough pipe: all or nothing (PIPE_BUF).
    // EAGAIN (ssh stopped reading) or EPIPE (ssh is gone): that host ends
    // by its connection instead.
    if (::write(h.stdin_fd, line.data(), line.size()) < 0 && errno != EAGAIN) close_stdin(h);
  }

  void close_stdin(host& h) {
    if (h.stdin_fd < 0) return;
    ::close(h.stdin_fd);
    h.stdin_fd = -1;
  }

  // --- our own lines ------------------------------------------------------

  void say_error(const std::string& line) {
    say_raw(fmt::format("dtrun: error: {}\n", printable(line)));
  }
  void say_info(const std::string& line) {
    say_raw(fmt::format("dtrun: {}\n", printable(line)));
  }
  // Through the same sink as the hosts' stderr, so lines never mix.
  void say_raw(std::string text) {
    auto it = messages_.insert(messages_.end(), std::move(text));
    err_.write(*it, [this, it] { messages_.erase(it); });
  }

  void finish_summary() {
    std::vector<std::vector<std::string>> blocks;
    for (const auto& h : hosts_) {
      for (const auto& b : h->blocks) blocks.push_back(b);
    }
    if (blocks.empty()) return;
    auto merged = merge_summaries(blocks);
    summary_code_ = summary_exit_code(merged);
    std::string text;
    for (const auto& line : merged) text += line + "\n";
    // The loop has stopped: written directly, after everything queued.
    ::fflush(stderr);
    std::size_t off = 0;
    while (off < text.size()) {
      ssize_t n = ::write(STDERR_FILENO, text.data() + off, text.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      off += static_cast<std::size_t>(n);
    }
  }

  int exit_code() const {
    if (stop_signal_ != 0) return 128 + stop_signal_;
    if (summary_code_) return *summary_code_;
    if (launch_failure_) return *launch_failure_;
    for (const auto& h : hosts_) {
      if (h->status && h->status->code != 0) return h->status->code;
    }
    return 0;
  }

  const fanout_options& options_;
  asio::io_context io_{1};
  asio::signal_set signals_;
  asio::steady_timer deadline_;
  agent::console_sink out_;
  agent::console_sink err_;
  std::list<std::string> messages_;
  std::vector<std::unique_ptr<host>> hosts_;
  std::size_t next_ = 0;        // the next host of the plan to start
  std::size_t connecting_ = 0;  // hosts holding a set-up slot
  std::optional<int> port_;
  std::optional<int> launch_failure_;
  std::optional<int> summary_code_;
  int stop_signal_ = 0;
  bool stopping_ = false;
  bool waiting_for_signals_ = true;
};

}  // namespace

int run_ssh_fanout(const fanout_options& options) {
  fanout f(options);
  return f.run();
}

}  // namespace dtrun::launcher
