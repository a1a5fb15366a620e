#include "agent/watch/timer_request.h"

#include <csignal>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

namespace dtrun::agent {

std::optional<timer_request> parse_timer_request(std::string_view line, std::string& error) {
  // No exceptions: a line is at most max_timer_line bytes, so depth and
  // size are bounded by the caller already.
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    error = "not a JSON object";
    return std::nullopt;
  }
  auto pid = j.find("pid");
  auto scope = j.find("scope_id");
  auto expiration = j.find("expiration_time");
  auto sig = j.find("signal");
  if (pid == j.end() || !pid->is_number_integer()) {
    error = "\"pid\" missing or not an integer";
    return std::nullopt;
  }
  if (scope == j.end() || !scope->is_string()) {
    error = "\"scope_id\" missing or not a string";
    return std::nullopt;
  }
  if (expiration == j.end() || !expiration->is_number()) {
    error = "\"expiration_time\" missing or not a number";
    return std::nullopt;
  }
  if (sig == j.end() || !sig->is_number_integer()) {
    error = "\"signal\" missing or not an integer";
    return std::nullopt;
  }
  // Unsigned JSON integers above INT64_MAX read as negative here: refused.
  auto pid_value = pid->get<std::int64_t>();
  if (pid->is_number_unsigned() && pid->get<std::uint64_t>() > std::numeric_limits<pid_t>::max()) {
    pid_value = -1;
  }
  if (pid_value <= 0 || pid_value > std::numeric_limits<pid_t>::max()) {
    error = "\"pid\" is not a process id";
    return std::nullopt;
  }
  const auto& scope_text = scope->get_ref<const std::string&>();
  if (scope_text.size() > max_scope_id) {
    error = "\"scope_id\" is too long";
    return std::nullopt;
  }
  double when = expiration->get<double>();
  if (!std::isfinite(when)) {
    error = "\"expiration_time\" is not finite";
    return std::nullopt;
  }
  // Python's signal numbers; 0 or below: a timer that never kills (torch).
  auto sig_value = sig->get<std::int64_t>();
  if (sig->is_number_unsigned() && sig->get<std::uint64_t>() >= NSIG) sig_value = NSIG;
  if (sig_value >= NSIG) {
    error = "\"signal\" is not a signal number";
    return std::nullopt;
  }
  timer_request r;
  r.pid = static_cast<pid_t>(pid_value);
  r.scope_id = scope_text;
  r.expiration_time = when;
  r.signal = sig_value > 0 ? static_cast<int>(sig_value) : 0;
  return r;
}

void timer_line_splitter::feed(std::string_view data, std::vector<line>& out) {
  while (!data.empty()) {
    std::size_t nl = data.find('\n');
    std::string_view piece = data.substr(0, nl);
    if (!overlong_ && partial_.size() + piece.size() > max_line_) {
      overlong_ = true;
      partial_.clear();
      partial_.shrink_to_fit();
    }
    if (!overlong_) partial_.append(piece);
    if (nl == std::string_view::npos) return;
    if (overlong_) {
      out.push_back({{}, true});
    } else {
      out.push_back({std::move(partial_), false});
    }
    partial_.clear();
    overlong_ = false;
    data.remove_prefix(nl + 1);
  }
}

}  // namespace dtrun::agent
