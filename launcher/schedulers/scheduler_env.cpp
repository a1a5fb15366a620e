#include "launcher/schedulers/scheduler_env.h"

#include <fmt/format.h>

namespace dtrun::launcher {

namespace {

// A typed override, set as it is (no text to parse again).
template <typename T, typename U>
void override_with(given_value<T>& flag, const std::optional<U>& value) {
  if (!value) return;
  flag.value = T(*value);
  flag.derived = true;
}

}  // namespace

void apply_overrides(launch_options& o, const flag_overrides& f) {
  override_with(o.nnodes, f.nnodes);
  override_with(o.node_rank, f.node_rank);
  override_with(o.nproc_per_node, f.nproc_per_node);
  override_with(o.rdzv_backend, f.rdzv_backend);
  override_with(o.rdzv_endpoint, f.rdzv_endpoint);
  override_with(o.rdzv_id, f.rdzv_id);
  override_with(o.master_addr, f.master_addr);
  override_with(o.master_port, f.master_port);
}

launch_options with_overrides(launch_options o, const flag_overrides& f) {
  apply_overrides(o, f);
  return o;
}

std::vector<std::string> describe(const scheduler_report& s) {
  std::vector<std::string> lines;
  if (s.scheduler.empty() || s.derived.empty()) return lines;
  std::string what = s.style.empty() ? s.scheduler : s.scheduler + ", " + s.style;
  std::vector<std::string> parts;
  for (const auto& d : s.derived) parts.push_back(fmt::format("{}={} ({})", d.setting, d.value, d.source));
  lines.push_back(fmt::format("{}: derived {} (--no-scheduler-detect turns this off)", what,
                              fmt::join(parts, ", ")));
  return lines;
}

}  // namespace dtrun::launcher
