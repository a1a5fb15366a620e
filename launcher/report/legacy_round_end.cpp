#include "launcher/report/legacy_round_end.h"

namespace dtrun::launcher {
namespace {

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

}  // namespace

records::failure_class class_of_legacy_round_end(std::string_view reason,
                                                 std::string* exception) {
  using records::failure_class;
  // A failure's tag, at the end of its reason.
  if (!reason.empty() && reason.back() == ']') {
    auto open = reason.rfind('[');
    if (open != std::string_view::npos) {
      std::string_view tag = reason.substr(open + 1, reason.size() - open - 2);
      std::string_view type;
      if (auto colon = tag.find(':'); colon != std::string_view::npos) {
        type = tag.substr(colon + 1);
        tag = tag.substr(0, colon);
      }
      if (auto c = records::parse_class(tag)) {
        if (exception != nullptr) *exception = std::string(type);
        return *c;
      }
    }
  }
  if (auto left = reason.find("left the job: "); left != std::string_view::npos) {
    // Why it left, after the host's name: a host or a health check's
    // words may say "preempt" too ("gke-...-preemptible-pool-...").
    auto why = reason.substr(left + std::string_view("left the job: ").size());
    return why.starts_with("preempted") ? failure_class::preemption : failure_class::health;
  }
  if (contains(reason, "left the job")) return failure_class::health;
  // After a node that left: its health check's last line may say "lost".
  if (contains(reason, " was lost") || contains(reason, "stopped sending heartbeats")) {
    return failure_class::node;
  }
  if (contains(reason, "waiting to join")) return failure_class::membership;
  // A failure reported by a dtrun without tags, or a node's other end.
  return contains(reason, "worker rank") ? failure_class::exit : failure_class::membership;
}

}  // namespace dtrun::launcher
