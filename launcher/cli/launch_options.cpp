#include "launcher/cli/launch_options.h"

#include <fmt/format.h>

#include "rendezvous/base/number_checks.h"
#include "rendezvous/base/number_parse.h"

namespace dtrun::launcher {

node_range parse_nnodes(const std::string& text) {
  auto colon = text.find(':');
  if (colon == std::string::npos) {
    int n = static_cast<int>(parse_integer(text, "--nnodes", 1, max_nnodes));
    return {n, n};
  }
  int lo = static_cast<int>(parse_integer(text.substr(0, colon), "--nnodes MIN", 1, max_nnodes));
  int hi = static_cast<int>(parse_integer(text.substr(colon + 1), "--nnodes MAX", 1, max_nnodes));
  if (lo > hi) {
    throw usage_error(fmt::format(
        "--nnodes: '{}' has MIN > MAX; give N or MIN:MAX with 1 <= MIN <= MAX <= {} (e.g. "
        "--nnodes=1:4)",
        text, max_nnodes));
  }
  return {lo, hi};
}

nnodes_flag::nnodes_flag(std::string text) : text_(std::move(text)) {
  try {
    range_ = parse_nnodes(text_);
  } catch (const usage_error& e) {
    error_ = e.what();
  }
}

nnodes_flag::nnodes_flag(int nodes) : text_(std::to_string(nodes)), range_{nodes, nodes} {}

node_range nnodes_flag::range() const {
  if (!error_.empty()) throw usage_error(error_);
  return range_;
}

nproc_flag::nproc_flag(std::string text) : text_(std::move(text)) {
  if (text_ == "auto") {
    kind_ = kind::auto_detect;
  } else if (text_ == "cpu") {
    kind_ = kind::cpu;
  } else if (text_ == "gpu") {
    kind_ = kind::gpu;
  } else if (text_ == "xpu") {
    kind_ = kind::xpu;
  } else {
    try {
      count_ = static_cast<int>(parse_integer(text_, "--nproc-per-node", 1, max_nproc_per_node));
    } catch (const usage_error&) {
      error_ = fmt::format(
          "--nproc-per-node: '{}' is not a whole number from 1 to {}, 'auto', 'cpu', 'gpu' or "
          "'xpu'",
          text_, max_nproc_per_node);
    }
  }
}

int nproc_flag::count() const {
  if (!error_.empty()) throw usage_error(error_);
  return count_;
}

std::string chosen_backend(const launch_options& o) {
  std::string backend = o.rdzv_backend.value;
  if (!o.rdzv_backend.given_or_derived() && !o.rdzv_endpoint.value.empty()) backend = "c10d";
  // torchrun's etcd backends speak the v2 API, which etcd 3.6 removed;
  // dtrun's speaks v3 under all three names.
  if (backend == "etcd" || backend == "etcd-v2") backend = "etcd-v3";
  return backend;
}

}  // namespace dtrun::launcher
