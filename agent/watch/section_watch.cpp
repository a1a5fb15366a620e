#include "agent/watch/section_watch.h"

#include <algorithm>

namespace dtrun::agent {
namespace {

constexpr auto min_section_tick = std::chrono::milliseconds(100);
constexpr auto max_section_tick = std::chrono::milliseconds(1000);

std::chrono::milliseconds tick_for(const section_timeouts& timeouts) {
  auto tick = max_section_tick;
  for (const auto& [name, timeout] : timeouts) {
    if (timeout.fixed) tick = std::min(tick, *timeout.fixed / 4);
  }
  return std::clamp(tick, min_section_tick, max_section_tick);
}

std::int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::optional<std::chrono::milliseconds> timeout_of(const std::string& section,
                                                    const section_timeouts& timeouts,
                                                    const section_learner& learner) {
  auto it = timeouts.find(section);
  if (it == timeouts.end()) return std::nullopt;
  if (it->second.fixed) return it->second.fixed;
  return learner.timeout(section);
}

std::optional<section_overstay> overstayed(int local_rank, const progress_snapshot& page,
                                           std::int64_t now_ns, const section_timeouts& timeouts,
                                           const section_learner& learner) {
  auto name = page.current_name();
  if (!name) return std::nullopt;
  auto timeout = timeout_of(*name, timeouts, learner);
  if (!timeout) return std::nullopt;
  auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::nanoseconds(now_ns - page.current_since_ns));
  if (elapsed < *timeout) return std::nullopt;
  bool learned = !timeouts.at(*name).fixed;
  return section_overstay{local_rank, *name, elapsed, *timeout, learned};
}

std::size_t learn_from(const progress_snapshot& page, std::vector<std::uint64_t>& seen,
                       section_learner& learner) {
  std::size_t fed = 0;
  if (seen.size() < page.sections.size()) seen.resize(page.sections.size(), 0);
  for (std::size_t slot = 0; slot < page.sections.size(); ++slot) {
    const auto& s = page.sections[slot];
    if (s.count <= seen[slot]) {
      seen[slot] = std::min(seen[slot], s.count);  // a new worker process counts from 0
      continue;
    }
    // The ring holds the last few: older unseen ones are gone (sampled).
    std::uint64_t first = s.count - s.recent.size() + 1;
    for (std::uint64_t index = std::max(first, seen[slot] + 1); index <= s.count; ++index) {
      learner.observe(s.name, index, s.recent[index - first]);
      ++fed;
    }
    seen[slot] = s.count;
  }
  return fed;
}

section_watch::section_watch(boost::asio::io_context& io, section_timeouts timeouts,
                             section_learner& learner, hooks callbacks)
    : timeouts_(std::move(timeouts)),
      learner_(learner),
      hooks_(std::move(callbacks)),
      tick_(tick_for(timeouts_)),
      timer_(io) {}

void section_watch::start_round(std::vector<int> local_ranks) {
  seen_.clear();
  for (int rank : local_ranks) seen_[rank] = {};
  timer_.arm_after(tick_, [this] { on_tick(); });
}

void section_watch::stop() { timer_.cancel(); }

void section_watch::on_tick() {
  auto now = monotonic_ns();
  std::optional<section_overstay> late;
  for (auto& [local_rank, seen] : seen_) {
    auto page = hooks_.read(local_rank);
    if (!page) continue;
    learn_from(*page, seen, learner_);
    if (!late) late = overstayed(local_rank, *page, now, timeouts_, learner_);
  }
  bool changed = false;
  for (const auto& [name, timeout] : timeouts_) {
    if (timeout.fixed) continue;
    auto learned = learner_.timeout(name);
    std::optional<std::int64_t> seconds;
    if (learned) seconds = learned->count() / 1000;
    if (learned_s_[name] != seconds) changed = true;
    learned_s_[name] = seconds;
  }
  if (changed && hooks_.learned) hooks_.learned();
  if (late) {
    stop();
    hooks_.overstayed(*late);
    return;
  }
  timer_.arm_after(tick_, [this] { on_tick(); });
}

}  // namespace dtrun::agent
