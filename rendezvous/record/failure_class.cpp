#include "rendezvous/record/failure_class.h"

#include <array>
#include <utility>

namespace dtrun::records {
namespace {

constexpr std::array<std::pair<failure_class, std::string_view>, 11> names{{
    {failure_class::exception, "exception"},
    {failure_class::exit, "exit"},
    {failure_class::signal, "signal"},
    {failure_class::oom_kill, "oom-kill"},
    {failure_class::collective_timeout, "collective-timeout"},
    {failure_class::hang, "hang"},
    {failure_class::watchdog, "watchdog"},
    {failure_class::node, "node"},
    {failure_class::health, "health"},
    {failure_class::membership, "membership"},
    {failure_class::preemption, "preemption"},
}};

}  // namespace

bool is_worker_failure(failure_class c) {
  switch (c) {
    case failure_class::exception:
    case failure_class::exit:
    case failure_class::signal:
    case failure_class::oom_kill:
    case failure_class::collective_timeout:
    case failure_class::hang:
    case failure_class::watchdog:
      return true;
    case failure_class::node:
    case failure_class::health:
    case failure_class::membership:
    case failure_class::preemption:
      return false;
  }
  return false;
}

std::string_view class_name(failure_class c) {
  for (const auto& [value, name] : names) {
    if (value == c) return name;
  }
  return "exit";
}

std::optional<failure_class> parse_class(std::string_view name) {
  for (const auto& [value, text] : names) {
    if (text == name) return value;
  }
  return std::nullopt;
}

const std::vector<std::string_view>& class_names() {
  static const std::vector<std::string_view> all = [] {
    std::vector<std::string_view> v;
    for (const auto& entry : names) v.push_back(entry.second);
    return v;
  }();
  return all;
}

std::string class_tag(failure_class c, const std::string& exception) {
  std::string tag = "[" + std::string(class_name(c));
  if (c == failure_class::exception && !exception.empty()) tag += ":" + exception;
  return tag + "]";
}

}  // namespace dtrun::records
