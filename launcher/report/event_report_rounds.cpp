#include "launcher/report/event_report_impl.h"

#include <fmt/format.h>

#include "launcher/report/legacy_round_end.h"
#include "rendezvous/record/round_record.h"

namespace dtrun::launcher::event_report_parts {
namespace {

bool is_stop_reason(const std::string& reason) {
  return reason.rfind("received ", 0) == 0 || reason.rfind("stopped on ", 0) == 0;
}

// The class of the round's end a `membership_change` event tells: from its
// record; a log written before round records has only the sentence.
std::string class_of_round_end(const json& fields) {
  auto at = fields.find("record");
  if (at != fields.end() && at->is_object()) {
    auto end = records::record_from_text(at->dump());
    if (end.kind != records::record_kind::foreign) {
      return std::string(records::class_name(records::round_end_class(end)));
    }
  }
  return std::string(records::class_name(class_of_legacy_round_end(text(fields, "reason"))));
}

std::string describe_failure(const json& f) {
  std::string message = text(f, "message");
  auto rank = integer(f, "rank");
  std::string who = rank ? fmt::format("rank {}", *rank) : std::string("a worker");
  if (!message.empty()) return fmt::format("{}: {}", who, one_line(message));
  std::string signal = text(f, "signal");
  if (!signal.empty()) return fmt::format("{} was killed by {}", who, signal);
  return fmt::format("{} exited with code {}", who, integer(f, "exit_code").value_or(-1));
}

}  // namespace

std::map<std::int64_t, round_events> gather_rounds(const std::vector<const event*>& run,
                                                   const std::vector<agent_record>& agents) {
  std::map<std::int64_t, round_events> rounds;
  for (const auto* e : run) {
    const json& f = e->fields;
    if (e->name == "restart") {
      if (auto after = integer(f, "after_round")) {
        auto count = integer(f, "count");
        keep_max(rounds[*after].restart,
                 count ? std::optional<int>(static_cast<int>(*count)) : std::nullopt);
      }
      continue;
    }
    auto round = integer(f, "round");
    if (!round || *round < 0) continue;
    if (e->name == "rendezvous_completed") {
      node_round& n = rounds[*round].nodes[e->agent];
      n.agent = e->agent;
      n.joined_at = e->time;
      n.world_size = static_cast<int>(integer(f, "world_size").value_or(0));
      auto ranks = f.find("ranks");
      if (ranks != f.end() && ranks->is_array() && ranks->size() == 2 &&
          (*ranks)[0].is_number_integer() && (*ranks)[1].is_number_integer()) {
        // Ranks are below 2^31: anything else (a corrupt line) counts 0
        // workers, and cannot overflow the subtraction.
        auto first = (*ranks)[0].get<std::int64_t>(), last = (*ranks)[1].get<std::int64_t>();
        bool sane = first >= 0 && last >= first && last < (std::int64_t{1} << 31);
        n.nproc = sane ? static_cast<int>(last - first + 1) : 0;
      } else {
        n.nproc = agents[e->agent].nproc_per_node;
      }
      continue;
    }
    auto it = rounds.find(*round);
    round_events& r = rounds[*round];
    if (e->name == "worker_started") {
      // Only the workers of a round this node joined (it logs that first).
      if (it != rounds.end() && r.nodes.count(e->agent) > 0) {
        r.nodes[e->agent].started.push_back(e->time);
      }
    } else if (e->name == "worker_exited") {
      r.exits.push_back(e->time);
    } else if (e->name == "worker_failed") {
      r.failures.push_back(e);
    } else if (e->name == "incident") {
      r.incidents.push_back(e);
    } else if (e->name == "hang_detected" || e->name == "membership_change" ||
               e->name == "group_stopping" || e->name == "node_left") {
      r.enders.push_back(e);
    } else if (e->name == "node_health") {
      auto healthy = f.find("healthy");
      if (healthy != f.end() && *healthy == false && text(f, "when") == "while running") {
        r.enders.push_back(e);
      }
    } else if (e->name == "job_succeeded") {
      r.succeeded = true;
    } else if (e->name == "job_failed") {
      r.job_failed = true;
    }
  }
  return rounds;
}

std::optional<report_incident> derive_incident(std::int64_t round, const round_events& r,
                                               const node_labels& labels) {
  const event* root = nullptr;
  double root_failed = 0;
  for (const auto* f : r.failures) {
    double at = time_field(f->fields, "exit_time").value_or(f->time);
    if (root == nullptr || at < root_failed) {
      root = f;
      root_failed = at;
    }
  }
  const event* hang = nullptr;
  const event* first_ender = nullptr;
  for (const auto* e : r.enders) {
    if (e->name == "hang_detected" && hang == nullptr) hang = e;
    if (first_ender == nullptr) first_ender = e;
  }
  if (root == nullptr && first_ender == nullptr) return std::nullopt;
  if (root == nullptr && hang == nullptr && first_ender->name == "group_stopping" &&
      is_stop_reason(text(first_ender->fields, "reason"))) {
    return std::nullopt;  // stopped by a signal or a user: not an incident
  }
  report_incident i;
  i.round = round;
  double detected = root != nullptr ? root->time : first_ender->time;
  for (const auto* f : r.failures) detected = std::min(detected, f->time);
  if (first_ender != nullptr) detected = std::min(detected, first_ender->time);
  i.detected_at = detected;
  if (root != nullptr) {
    i.failed_at = std::min(root_failed, detected);
    const json& f = root->fields;
    i.incident_class = !text(f, "message").empty() ? "exception"
                       : !text(f, "signal").empty() ? "signal"
                                                    : "exit";
    if (auto rank = integer(f, "rank")) i.rank = static_cast<int>(*rank);
    i.culprit_host = text(f, "host").empty() ? root->host : text(f, "host");
    if (*i.culprit_host == root->host) i.culprit_node = labels.at(root->agent);
    i.detail = describe_failure(f);
  } else {
    i.failed_at = detected;
    const json& f = first_ender->fields;
    std::string reason = text(f, "reason");
    if (first_ender->name == "membership_change") {
      i.incident_class = class_of_round_end(f);
    } else if (first_ender->name == "node_left" || first_ender->name == "node_health") {
      i.incident_class = "health";
      i.culprit_host = first_ender->host;
      i.culprit_node = labels.at(first_ender->agent);
    }
    i.detail = reason.empty() ? first_ender->name : one_line(reason);
  }
  if (hang != nullptr) {
    // Detected once nothing moved for idle_s: the hang began then.
    i.incident_class = "hang";
    i.section = one_line(text(hang->fields, "section"));
    double idle = duration(hang->fields, "idle_s").value_or(0);
    // Not before the round began (a corrupt idle_s put it in 1970).
    double began = hang->time;
    for (const auto& [agent, n] : r.nodes) began = std::min(began, n.joined_at);
    i.failed_at = std::min(i.failed_at, std::max(hang->time - idle, began));
    i.detected_at = std::min(*i.detected_at, hang->time);
    i.detail = fmt::format("no progress from any worker for {:.1f} s", idle);
  }
  i.detect_s = std::max(0.0, *i.detected_at - i.failed_at);
  i.restart = r.restart;
  return i;
}

// The incident from the agents' own `incident` events (one per node).
// The node that saw the failure itself knows when it happened (its
// detect_s is set; the others learnt of it later): its event speaks for
// the incident, and its host is the culprit's when it names a rank.
report_incident logged_incident(std::int64_t round, const std::vector<const event*>& events,
                                const node_labels& labels) {
  const event* chosen = nullptr;
  std::optional<double> chosen_failed;
  for (const auto* e : events) {
    auto culprit = text(e->fields, "culprit_host");
    if (!culprit.empty() && culprit == e->host) {
      chosen = e;
      break;
    }
    auto failed = time_field(e->fields, "failed_at");
    if (number(e->fields, "detect_s") && failed && (!chosen_failed || *failed < *chosen_failed)) {
      chosen = e;
      chosen_failed = failed;
    }
  }
  bool saw_it = chosen != nullptr;
  if (chosen == nullptr) chosen = events.front();
  report_incident i;
  i.round = round;
  i.logged = true;
  const json& c = chosen->fields;
  if (auto cls = text(c, "class"); !cls.empty()) i.incident_class = cls;
  if (auto rank = integer(c, "rank")) i.rank = static_cast<int>(*rank);
  if (auto culprit = text(c, "culprit_host"); !culprit.empty()) {
    i.culprit_host = culprit;
  } else if (saw_it && i.rank && !c.contains("culprit_host")) {
    i.culprit_host = chosen->host;
  }
  if (i.culprit_host && *i.culprit_host == chosen->host && (saw_it || c.contains("culprit_host"))) {
    i.culprit_node = labels.at(chosen->agent);
  }
  i.detail = one_line(text(c, "detail"));
  i.exception_type = text(c, "exception_type");
  i.section = one_line(text(c, "section"));
  i.step = integer(c, "step");
  std::optional<double> failed, detected, resumed, detect, recover;
  bool all_ended = true;
  bool detect_field = false;
  for (const auto* e : events) {
    const json& f = e->fields;
    keep_min(failed, time_field(f, "failed_at"));
    keep_min(detected, time_field(f, "detected_at"));
    auto back = time_field(f, "resumed_at");
    if (back) all_ended = false;
    keep_max(resumed, back);
    detect_field = detect_field || f.contains("detect_s");
    keep_min(detect, duration(f, "detect_s"));
    keep_max(recover, duration(f, "recover_s"));
    keep_max(i.steps_lost, integer(f, "steps_lost"));
    auto restart = integer(f, "restart");
    keep_max(i.restart, restart ? std::optional<int>(static_cast<int>(*restart)) : std::nullopt);
  }
  i.failed_at = failed.value_or(detected.value_or(chosen->time));
  i.detected_at = detected;
  if (!all_ended) i.resumed_at = resumed;
  // detect_s null everywhere: no node knows when it happened (a node lost).
  if (detect || detect_field) {
    i.detect_s = detect;
  } else if (detected) {
    i.detect_s = std::max(0.0, *detected - i.failed_at);
  }
  // The job's recovery: the earliest failure until the last node ran again
  // (each node's recover_s counts from when it learnt of it).
  if (i.resumed_at && failed) {
    i.recover_s = std::max(0.0, *i.resumed_at - *failed);
  } else {
    i.recover_s = recover;
  }
  return i;
}

}  // namespace dtrun::launcher::event_report_parts
