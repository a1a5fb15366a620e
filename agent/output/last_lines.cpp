#include "agent/output/last_lines.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "agent/output/output_tail.h"
#include "rendezvous/base/printable.h"

namespace dtrun::agent {

namespace {
constexpr std::string_view line_ends = "\r\n";
}  // namespace

void last_lines::line::append(std::string_view more) {
  if (kept.size() < max_line_bytes) {
    kept.append(more.substr(0, max_line_bytes - kept.size()));
  }
  size += more.size();
}

void last_lines::push(line ended) {
  if (ended.size == 0) return;
  ended_.push_back(std::move(ended));
  if (ended_.size() > max_lines) ended_.pop_front();
}

void last_lines::feed(std::string_view data) {
  std::size_t last_end = data.find_last_of(line_ends);
  if (last_end == std::string_view::npos) {
    current_.append(data);
    return;
  }
  // The chunk's complete lines, newest first, walking back from its last
  // line end until max_lines are found or the chunk's start is reached.
  std::vector<std::string_view> newest;
  bool reached_start = false;
  std::size_t end = last_end;
  while (newest.size() < max_lines) {
    std::size_t previous =
        end == 0 ? std::string_view::npos : data.find_last_of(line_ends, end - 1);
    if (previous == std::string_view::npos) {
      reached_start = true;
      break;
    }
    std::string_view segment = data.substr(previous + 1, end - previous - 1);
    if (!segment.empty()) newest.push_back(segment);
    end = previous;
  }
  if (reached_start) {
    // The chunk's first segment ends the line that was being written.
    current_.append(data.substr(0, end));
    push(std::move(current_));
  } else {
    // Older than the max_lines newer ones: neither it nor any line before
    // it is shown any more.
    ended_.clear();
  }
  current_ = line{};
  for (auto it = newest.rbegin(); it != newest.rend(); ++it) {
    line ended;
    ended.append(*it);
    push(std::move(ended));
  }
  current_.append(data.substr(last_end + 1));
}

std::vector<std::string> last_lines::lines() const {
  std::vector<const line*> shown;
  for (const auto& l : ended_) shown.push_back(&l);
  if (current_.size > 0) shown.push_back(&current_);
  std::size_t skip = shown.size() > max_lines ? shown.size() - max_lines : 0;
  std::vector<std::string> out;
  for (std::size_t i = skip; i < shown.size(); ++i) {
    const line& l = *shown[i];
    std::string text = last_output_text(l.kept, max_line_bytes);
    // Cut here, or already when it was kept.
    if (l.size > l.kept.size() || text.size() < printable(l.kept).size()) {
      text += fmt::format(" ... ({} bytes)", l.size);
    }
    out.push_back(std::move(text));
  }
  return out;
}

}  // namespace dtrun::agent
