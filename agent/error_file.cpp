#include "agent/error_file.h"

#include <fstream>

#include <nlohmann/json.hpp>

namespace dtrun::agent {

std::optional<std::string> read_error_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  auto doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("message")) return std::nullopt;
  const auto& message = doc["message"];
  if (message.is_string()) return message.get<std::string>();
  if (message.is_object() && message.contains("message") && message["message"].is_string()) {
    return message["message"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace dtrun::agent
