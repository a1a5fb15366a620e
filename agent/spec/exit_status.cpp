#include "agent/spec/exit_status.h"

#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <string_view>

#include <fmt/format.h>

#include "rendezvous/base/parse_whole.h"

namespace dtrun::agent {
namespace {

struct named_signal {
  int number;
  std::string_view name;
};

// The signals a user can meet; others print as "signal N".
constexpr named_signal signal_names[] = {
    {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
    {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
    {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGCHLD, "SIGCHLD"},
    {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"}, {SIGTTIN, "SIGTTIN"},
    {SIGTTOU, "SIGTTOU"}, {SIGURG, "SIGURG"},   {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"},
    {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"}, {SIGIO, "SIGIO"},
    {SIGPWR, "SIGPWR"},   {SIGSYS, "SIGSYS"},
};

}  // namespace

exit_status decode_wait_status(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return {128 + sig, sig};
  }
  if (WIFEXITED(status)) return {WEXITSTATUS(status), 0};
  return {1, 0};  // stopped/continued are never passed here (no WUNTRACED)
}

std::string signal_name(int signal) {
  for (const auto& s : signal_names) {
    if (s.number == signal) return std::string(s.name);
  }
  return fmt::format("signal {}", signal);
}

int parse_signal(const std::string& text) {
  std::string upper = text;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (!upper.empty() && std::all_of(upper.begin(), upper.end(),
                                    [](unsigned char c) { return std::isdigit(c); })) {
    int n = upper.size() < 4 ? parse_whole<int>(upper).value_or(0) : 0;
    return n > 0 && n < NSIG ? n : 0;
  }
  if (upper.rfind("SIG", 0) != 0) upper = "SIG" + upper;
  for (const auto& s : signal_names) {
    if (s.name == upper) return s.number;
  }
  return 0;
}

std::string describe(const exit_status& status) {
  if (status.signal != 0) {
    return fmt::format("was killed by signal {} ({})", status.signal, signal_name(status.signal));
  }
  return fmt::format("exited with code {}", status.code);
}

int exec_failure_code(int error_number) {
  return error_number == ENOENT || error_number == ENOTDIR ? exit_not_found : exit_not_executable;
}

}  // namespace dtrun::agent
