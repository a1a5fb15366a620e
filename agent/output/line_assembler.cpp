#include "agent/output/line_assembler.h"

#include <algorithm>

namespace dtrun::agent {

line_assembler::line_assembler(std::string prefix, std::size_t max_line)
    : prefix_(std::move(prefix)), max_line_(std::max<std::size_t>(max_line, 1)) {
  partial_.reserve(std::min<std::size_t>(max_line_, 4096));
}

// One line: the held start, `tail`, '\n'.
void line_assembler::emit(std::string_view tail, std::string& out) {
  out.append(prefix_);
  out.append(partial_);
  out.append(tail);
  out.push_back('\n');
  partial_.clear();
}

std::size_t line_assembler::feed(std::string_view data, std::string& out, std::size_t out_limit) {
  std::size_t pos = 0;
  while (pos < data.size() && out.size() < out_limit) {
    std::size_t newline = data.find('\n', pos);
    std::size_t end = newline == std::string_view::npos ? data.size() : newline;
    std::size_t room = max_line_ - partial_.size();
    if (end - pos > room) {
      // Longer than the cap: print what fits as a line of its own.
      emit(data.substr(pos, room), out);
      pos += room;
    } else if (newline != std::string_view::npos) {
      emit(data.substr(pos, end - pos), out);
      pos = end + 1;
    } else {
      partial_.append(data.substr(pos));
      pos = data.size();
    }
  }
  return pos;
}

void line_assembler::finish(std::string& out) {
  if (!partial_.empty()) emit({}, out);
}

}  // namespace dtrun::agent
