// --section-timeouts: a rank that overstays its section (dtrun.section(),
// or the step between dtrun.step() calls) is a hang of that section,
// caught with every worker's stacks as --hang-timeout's hang is, and the
// round ends as a `hang` with the section named (docs/agent.md, "Section
// timeouts"). `auto` timeouts are learned (section_learner.h) and kept in
// the run folder's section_timeouts.json across the group's restarts.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <utility>

#include <fmt/format.h>

#include "agent/policy/elastic_agent_impl.h"
#include "agent/watch/hang_report.h"
#include "rendezvous/base/printable.h"

namespace dtrun::agent {
namespace fs = std::filesystem;

namespace {

std::string section_learning_file(const std::string& run_dir) {
  return (fs::path(run_dir) / "section_timeouts.json").string();
}

double in_seconds(std::chrono::milliseconds d) { return static_cast<double>(d.count()) / 1000.0; }

}  // namespace

void elastic_agent::impl::start_section_watch() {
  if (options_.section_timeouts.empty()) return;
  if (hook_dir_.empty()) {
    log("warning: --section-timeouts needs dtrun's start-up hook in Python workers (it makes "
        "`import dtrun` work); with --no-python or --no-stack-hook no section is watched");
    return;
  }
  load_learned_sections();
  section_watch::hooks hooks;
  hooks.read = [this](int local_rank) -> std::optional<progress_snapshot> {
    for (const auto& w : group_.workers()) {
      if (w.local_rank == local_rank && w.alive()) return pages_.read(local_rank, w.pid);
    }
    return std::nullopt;
  };
  hooks.overstayed = [this](const section_overstay& late) { on_section_hang(late); };
  hooks.learned = [this] { save_learned_sections(); };
  sections_.emplace(io_, options_.section_timeouts, *learner_, std::move(hooks));
}

// What an earlier round of this run learned (the folder is this agent's:
// a new dtrun starts learning again).
void elastic_agent::impl::load_learned_sections() {
  learner_.emplace();
  std::ifstream in(section_learning_file(run_dir_));
  if (!in) return;
  auto document = nlohmann::json::parse(in, nullptr, false);
  std::string error;
  if (auto kept = section_learner::from_json(document, learner_->rules(), error)) {
    learner_ = std::move(*kept);
  } else {
    log(fmt::format("warning: {}: {}; learning section timeouts again",
                    printable(section_learning_file(run_dir_)), error));
  }
}

void elastic_agent::impl::save_learned_sections() {
  if (!learner_) return;
  std::string path = section_learning_file(run_dir_);
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << learner_->to_json().dump(1) << "\n";
    if (!out) {
      log_debug(fmt::format("cannot write {}", printable(tmp)));
      return;
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);  // readers see the old file or the new one
}

// A rank overstayed its section: every worker's stacks (where each is),
// then that rank is killed as a hang's culprit, so the failure summary and
// the round's record name it and its section.
void elastic_agent::impl::on_section_hang(const section_overstay& late) {
  if (phase_ != phase::running) return;
  ++hangs_;
  hang_idle_ = late.elapsed;
  const worker* culprit = nullptr;
  for (const auto& w : group_.workers()) {
    if (w.local_rank == late.local_rank) culprit = &w;
  }
  if (culprit == nullptr) return;
  std::string limit = fmt::format("--section-timeouts {}={}", late.section,
                                  late.learned ? fmt::format("auto, learned {:g} s", in_seconds(late.timeout))
                                               : fmt::format("{:g}", in_seconds(late.timeout)));
  log_error(fmt::format("hang: rank {} has been in section {} for {:.1f} s ({}); capturing "
                        "every worker's stacks",
                        culprit->rank, printable(late.section), in_seconds(late.elapsed), limit));
  auto round = round_info_.round;
  stacks_->capture(group_.workers(), round, [this, late, limit, round, t = current_ticket()](
                                                const std::vector<captured_stack>& stacks) {
    if (auto report = hang_report_of(stacks, round, t)) kill_section_culprit(late, limit, *report);
  });
}

void elastic_agent::impl::kill_section_culprit(const section_overstay& late,
                                               const std::string& limit,
                                               const hang_report& report) {
  for (auto& w : group_.workers()) {
    if (w.local_rank != late.local_rank || !w.alive()) continue;
    auto where = report.where.find(w.local_rank);
    auto file = report.files.find(w.local_rank);
    std::string stacks = file == report.files.end() ? std::string() : file->second;
    // idle_s: when the hang began, as --hang-timeout's event says it.
    reporter_.hang_detected({{"idle_s", in_seconds(late.elapsed)},
                             {"section", late.section},
                             {"rank", w.rank},
                             {"local_rank", w.local_rank},
                             {"in_section_s", in_seconds(late.elapsed)},
                             {"section_timeout_s", in_seconds(late.timeout)},
                             {"learned", late.learned},
                             {"where", where == report.where.end() ? "" : where->second},
                             {"stacks", stacks}});
    w.watchdog_signal = SIGKILL;
    w.hang_section = late.section;
    w.hang = fmt::format("in section {} for {:.1f} s ({}){}{}", late.section,
                         in_seconds(late.elapsed), limit,
                         where == report.where.end() || where->second.empty()
                             ? std::string()
                             : "; it was in " + where->second,
                         stacks.empty() ? std::string() : "; stacks: " + stacks);
    group_.signal_one(w, SIGKILL);
  }
}

}  // namespace dtrun::agent
