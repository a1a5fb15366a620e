#include "agent/spec/restart_policy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "agent/spec/exit_status.h"
#include "rendezvous/base/parse_whole.h"
#include "rendezvous/base/printable.h"
#include "rendezvous/base/trim.h"
#include "rendezvous/base/usage_error.h"

namespace dtrun::agent {
namespace {

constexpr std::size_t max_progress_bytes = 64;

[[noreturn]] void refuse(const std::string& entry) {
  throw usage_error(fmt::format(
      "--no-restart-on: '{}' is not a failure class or a rule; use exception, exit, signal, "
      "oom-kill, collective-timeout, hang, watchdog, exception:TypeName, exit:N (1-255) or "
      "signal:NAME, separated by commas",
      printable(entry)));
}

bool is_type_name(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_';
    if (!ok) return false;
  }
  return true;
}

no_restart_rule parse_rule(const std::string& entry) {
  no_restart_rule rule;
  rule.text = entry;
  auto colon = entry.find(':');
  std::string head = entry.substr(0, colon);
  if (colon == std::string::npos) {
    auto c = parse_class(head);
    if (!c || !is_worker_failure(*c)) refuse(entry);
    rule.klass = c;
    return rule;
  }
  std::string value = entry.substr(colon + 1);
  if (head == "exception") {
    // "exception:torch.cuda.OutOfMemoryError" means its last part, as the
    // classifier names types.
    if (auto dot = value.rfind('.'); dot != std::string::npos) value = value.substr(dot + 1);
    if (!is_type_name(value)) refuse(entry);
    rule.klass = failure_class::exception;
    rule.exception_type = value;
  } else if (head == "exit") {
    auto code = parse_whole<int>(value);
    if (!code || *code < 1 || *code > 255) refuse(entry);
    rule.exit_code = code;
  } else if (head == "signal") {
    rule.signal = parse_signal(value);
    if (rule.signal == 0) refuse(entry);
  } else {
    refuse(entry);
  }
  return rule;
}

}  // namespace

std::vector<no_restart_rule> parse_no_restart_on(const std::string& list) {
  std::vector<no_restart_rule> rules;
  std::size_t start = 0;
  while (start <= list.size()) {
    auto comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    std::string entry(trim(std::string_view(list).substr(start, comma - start)));
    if (!entry.empty()) {
      rules.push_back(parse_rule(entry));
    } else if (!trim(list).empty()) {
      refuse(entry);  // "a,,b", "a,": a missing entry is a typo, not nothing
    }
    start = comma + 1;
  }
  return rules;
}

const no_restart_rule* matching_rule(const std::vector<no_restart_rule>& rules,
                                     const failure_facts& f) {
  for (const auto& rule : rules) {
    bool match = false;
    if (rule.exit_code) {
      match = f.signal == 0 && f.exit_code == *rule.exit_code;
    } else if (rule.signal != 0) {
      match = f.signal == rule.signal;
    } else if (!rule.exception_type.empty()) {
      match = f.klass == failure_class::exception && f.exception_type == rule.exception_type;
    } else {
      match = rule.klass && f.klass == *rule.klass;
    }
    if (match) return &rule;
  }
  return nullptr;
}

std::optional<std::int64_t> read_progress_file(const std::string& path, std::string& problem) {
  // The training writes it; it could be anything by now: never follow a
  // FIFO (a read that blocks the agent) nor read more than a number.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    problem = errno == ENOENT ? "it does not exist (yet)" : std::strerror(errno);
    return std::nullopt;
  }
  struct stat st{};
  std::string data;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    problem = "it is not a regular file";
  } else if (st.st_size > static_cast<off_t>(max_progress_bytes)) {
    problem = fmt::format("it is {} bytes, more than one number ({} at most)", st.st_size,
                          max_progress_bytes);
  } else {
    data.resize(max_progress_bytes);
    ssize_t n = ::pread(fd, data.data(), data.size(), 0);
    data.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  }
  ::close(fd);
  if (!problem.empty()) return std::nullopt;
  auto step = parse_whole<std::int64_t>(std::string(trim(data)));
  if (!step || *step < 0) {
    problem = fmt::format("'{}' is not a whole number of steps", printable(trim(data)));
    return std::nullopt;
  }
  return step;
}

}  // namespace dtrun::agent
