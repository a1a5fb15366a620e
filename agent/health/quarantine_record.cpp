#include "agent/health/quarantine_record.h"

#include <signal.h>

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

namespace dtrun::agent {

std::string quarantine_record::to_json() const {
  nlohmann::ordered_json j{{"machine", machine},   {"host", host},
                           {"quarantines", quarantines}, {"since", since},
                           {"until", until},       {"cooldown_s", cooldown_s},
                           {"reason", reason},     {"rank", rank},
                           {"fault", fault}};
  return j.dump();
}

std::optional<quarantine_record> quarantine_record::parse(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  try {
    quarantine_record r;
    r.machine = j.at("machine").get<std::string>();
    r.host = j.at("host").get<std::string>();
    r.quarantines = j.at("quarantines").get<int>();
    r.since = j.at("since").get<double>();
    r.until = j.at("until").get<double>();
    r.cooldown_s = j.at("cooldown_s").get<double>();
    r.reason = j.at("reason").get<std::string>();
    r.rank = j.value("rank", -1);
    r.fault = j.value("fault", std::string("health"));
    if (r.quarantines < 0) return std::nullopt;
    return r;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

std::vector<quarantine_record> parse_records(const std::vector<std::string>& texts) {
  std::vector<quarantine_record> records;
  for (const auto& text : texts) {
    if (auto r = quarantine_record::parse(text)) records.push_back(std::move(*r));
  }
  return records;
}

std::chrono::milliseconds next_cooldown(int earlier_quarantines, std::chrono::milliseconds first,
                                        std::chrono::milliseconds longest) {
  auto cooldown = first;
  for (int i = 0; i < earlier_quarantines && cooldown < longest; ++i) cooldown *= 2;
  return std::min(cooldown, longest);
}

std::string machine_fault(const exit_status& status, const std::string& message) {
  if (status.signal == SIGBUS) return "SIGBUS";
  // CUDA's words for it ("CUDA error: uncorrectable ECC error encountered").
  if (message.find("uncorrectable ECC error") != std::string::npos) return "ECC error";
  return {};
}

bool follows_the_rank(const std::vector<quarantine_record>& list, const std::string& machine,
                      int rank, const std::string& fault) {
  return std::any_of(list.begin(), list.end(), [&](const quarantine_record& r) {
    return r.machine != machine && r.rank == rank && r.rank >= 0 && r.fault == fault;
  });
}

// A host name as DNS and Slurm spell them: letters, digits, '-', '.', '_'.
// A record from the store is not trusted to hold one.
bool host_name_like(const std::string& host) {
  if (host.empty() || host.size() > 253) return false;
  return std::all_of(host.begin(), host.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
  });
}

std::string exclude_list(const std::vector<quarantine_record>& list) {
  std::vector<std::string> hosts;
  std::string text;
  for (const auto& r : list) {
    if (!host_name_like(r.host)) continue;
    if (std::find(hosts.begin(), hosts.end(), r.host) != hosts.end()) continue;
    hosts.push_back(r.host);
    text += r.host + "\n";
  }
  return text;
}

}  // namespace dtrun::agent
