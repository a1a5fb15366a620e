#include "agent/output/line_filter.h"

#include <algorithm>

namespace dtrun::agent {

std::vector<std::string> parse_duplicate_filters(std::string_view text) {
  std::vector<std::string> filters;
  std::string item;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != ',') {
      item += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      item += ',';  // ",," is a literal comma
      ++i;
    } else {
      if (!item.empty()) filters.push_back(std::move(item));
      item.clear();
    }
  }
  if (!item.empty()) filters.push_back(std::move(item));
  return filters;
}

void select_matching_lines(std::string_view lines, std::size_t prefix_size,
                           const std::vector<std::string>& needles, std::string& out) {
  while (!lines.empty()) {
    std::size_t end = lines.find('\n');
    std::size_t size = end == std::string_view::npos ? lines.size() : end + 1;
    std::string_view line = lines.substr(0, size);
    // torchrun tests the line as read, newline included, prefix excluded.
    std::string_view content = line.substr(std::min(prefix_size, line.size()));
    if (std::any_of(needles.begin(), needles.end(), [content](const std::string& needle) {
          return content.find(needle) != std::string_view::npos;
        })) {
      out.append(line);
    }
    lines.remove_prefix(size);
  }
}

}  // namespace dtrun::agent
