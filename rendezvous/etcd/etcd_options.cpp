#include "rendezvous/etcd/etcd_options.h"

#include <fmt/format.h>

namespace dtrun::rendezvous {

std::optional<std::vector<endpoint>> parse_etcd_members(std::string_view text, bool& tls,
                                                        std::string& error) {
  std::vector<endpoint> out;
  std::optional<bool> scheme_tls;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    auto item = text.substr(start, comma - start);
    start = comma + 1;
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) continue;
    std::optional<bool> this_tls;
    if (item.starts_with("http://")) {
      this_tls = false;
      item.remove_prefix(7);
    } else if (item.starts_with("https://")) {
      this_tls = true;
      item.remove_prefix(8);
    }
    if (!item.empty() && item.back() == '/') item.remove_suffix(1);
    if (this_tls) {
      if (scheme_tls && *scheme_tls != *this_tls) {
        error = "the etcd members mix http:// and https://; use one protocol for all";
        return std::nullopt;
      }
      scheme_tls = this_tls;
    }
    auto ep = parse_endpoint(item, etcd_default_port);
    if (!ep || ep->port == 0) {
      error = fmt::format("etcd member '{}' is not HOST[:PORT] (IPv6 as [addr]:port)", item);
      return std::nullopt;
    }
    out.push_back(*ep);
  }
  if (out.empty()) {
    error = "no etcd member given; pass --rdzv-endpoint=HOST:PORT[,HOST:PORT...]";
    return std::nullopt;
  }
  if (scheme_tls) tls = *scheme_tls;
  return out;
}

std::string members_text(const std::vector<endpoint>& members) {
  std::string out;
  for (const auto& m : members) {
    if (!out.empty()) out += ',';
    out += to_string(m);
  }
  return out;
}

}  // namespace dtrun::rendezvous
