#include "agent/output/output_tail.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/process/fd_closer.h"
#include "rendezvous/base/printable.h"

namespace dtrun::agent {

void line_tail::feed(std::string_view data) {
  for (char c : data) {
    if (c == '\n' || c == '\r') {
      if (!current_.empty()) ended_.swap(current_);
      current_.clear();
    } else if (current_.size() < max_bytes) {
      current_ += c;
    }
  }
}

std::optional<std::string> last_line_of_file(const std::string& path, std::size_t window) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return std::nullopt;
  fd_closer closer{fd};
  struct stat st {};
  // A log file, not a FIFO or a device someone put in its place.
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  auto size = static_cast<std::size_t>(st.st_size);
  std::size_t from = size > window ? size - window : 0;
  std::string bytes(size - from, '\0');
  ssize_t n = ::pread(fd, bytes.data(), bytes.size(), static_cast<off_t>(from));
  if (n <= 0) return std::nullopt;
  bytes.resize(static_cast<std::size_t>(n));
  line_tail tail;
  tail.feed(bytes);
  if (tail.last().empty()) return std::nullopt;
  return tail.last();
}

std::string last_output_text(std::string_view line, std::size_t max_bytes) {
  std::string text = printable(line);
  if (text.size() <= max_bytes) return text;
  std::size_t cut = max_bytes;
  // Back to the start of a UTF-8 character (continuation bytes are 10xxxxxx).
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  text.resize(cut);
  return text;
}

}  // namespace dtrun::agent
