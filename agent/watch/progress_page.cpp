#include "agent/watch/progress_page.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "rendezvous/base/printable.h"

namespace dtrun::agent {
namespace layout = progress_layout;

namespace {

std::int64_t load(const std::int64_t* word, std::memory_order order) {
  // The mapping is shared with the worker: every read is an atomic one.
  return std::atomic_ref<std::int64_t>(*const_cast<std::int64_t*>(word)).load(order);
}

std::string name_in(const progress_words& page, std::size_t slot) {
  char text[layout::name_bytes] = {};
  std::memcpy(text, &page[layout::sections + slot * layout::section_words], layout::name_bytes);
  return std::string(text, ::strnlen(text, layout::name_bytes - 1));
}

std::vector<step_timing> step_ring_of(const progress_words& page, std::uint64_t done) {
  std::vector<step_timing> steps;
  std::uint64_t first = done > layout::step_ring_entries ? done - layout::step_ring_entries : 0;
  for (std::uint64_t k = first + 1; k <= done; ++k) {
    std::size_t at = layout::step_ring + ((k - 1) % layout::step_ring_entries) * layout::step_entry_words;
    steps.push_back({page[at], page[at + 1], page[at + 2], page[at + 3], page[at + 4]});
  }
  return steps;
}

section_intervals section_of(const progress_words& page, std::size_t slot) {
  section_intervals s;
  s.name = name_in(page, slot);
  std::size_t base = layout::sections + slot * layout::section_words + layout::name_words;
  s.count = static_cast<std::uint64_t>(std::max<std::int64_t>(page[base], 0));
  std::uint64_t first = s.count > layout::interval_ring ? s.count - layout::interval_ring : 0;
  for (std::uint64_t c = first + 1; c <= s.count; ++c) {
    s.recent.push_back(page[base + 1 + (c - 1) % layout::interval_ring]);
  }
  return s;
}

}  // namespace

std::optional<std::string> progress_snapshot::current_name() const {
  if (!current || *current < 0 || static_cast<std::size_t>(*current) >= sections.size()) {
    return std::nullopt;
  }
  const auto& name = sections[static_cast<std::size_t>(*current)].name;
  if (name.empty()) return std::nullopt;
  return name;
}

progress_words empty_progress_page() {
  progress_words page{};
  page[layout::w_magic] = layout::magic;
  page[layout::w_version] = layout::version;
  page[layout::w_size] = static_cast<std::int64_t>(layout::page_bytes);
  page[layout::w_step] = -1;
  page[layout::w_current] = -1;
  // Slot 0 is the steps' own: named by the agent, so the worker never
  // writes a name for it.
  std::memcpy(&page[layout::sections], "step", 4);
  page[layout::w_named] = 1;
  return page;
}

std::optional<progress_snapshot> decode_progress_page(const progress_words& page,
                                                      std::string& error) {
  if (page[layout::w_magic] != layout::magic) {
    error = "not a dtrun progress page (bad magic)";
    return std::nullopt;
  }
  if (page[layout::w_version] != layout::version) {
    error = fmt::format("progress page version {}, this dtrun reads version {}",
                        page[layout::w_version], layout::version);
    return std::nullopt;
  }
  progress_snapshot s;
  s.writer_pid = static_cast<pid_t>(page[layout::w_writer_pid]);
  if (page[layout::w_step] >= 0) s.step = page[layout::w_step];
  s.step_start_ns = page[layout::w_step_start];
  s.steps_done = static_cast<std::uint64_t>(std::max<std::int64_t>(page[layout::w_steps_done], 0));
  auto named = static_cast<std::size_t>(
      std::clamp<std::int64_t>(page[layout::w_named], 0, layout::section_slots));
  for (std::size_t slot = 0; slot < named; ++slot) s.sections.push_back(section_of(page, slot));
  auto current = page[layout::w_current];
  if (current >= 0 && static_cast<std::size_t>(current) < named) {
    s.current = static_cast<int>(current);
  }
  s.current_since_ns = page[layout::w_current_since];
  s.depth = static_cast<int>(std::clamp<std::int64_t>(page[layout::w_depth], 0, 1 << 20));
  s.recent_steps = step_ring_of(page, s.steps_done);
  return s;
}

bool copy_consistent(const std::int64_t* page, progress_words& out, int tries) {
  for (int attempt = 0; attempt < tries; ++attempt) {
    auto before = load(page + layout::w_sequence, std::memory_order_acquire);
    if (before % 2 != 0) continue;
    for (std::size_t i = 0; i < layout::words; ++i) out[i] = load(page + i, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (load(page + layout::w_sequence, std::memory_order_relaxed) == before) return true;
  }
  return false;
}

progress_page::progress_page(const std::string& path) : path_(path) {
  auto fail = [&](const char* what) {
    int saved = errno;
    return std::runtime_error(fmt::format("cannot {} the progress page {}: {}", what,
                                          printable(path), std::strerror(saved)));
  };
  ::unlink(path.c_str());  // a previous round's page may still be mapped by its worker
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) throw fail("create");
  auto page = empty_progress_page();
  ssize_t written = ::pwrite(fd, page.data(), layout::page_bytes, 0);
  if (written != static_cast<ssize_t>(layout::page_bytes)) {
    auto error = fail("write");
    ::close(fd);
    throw error;
  }
  void* mapped = ::mmap(nullptr, layout::page_bytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (mapped == MAP_FAILED) throw fail("map");
  words_ = static_cast<std::int64_t*>(mapped);
}

progress_page::~progress_page() {
  if (words_ != nullptr) ::munmap(words_, layout::page_bytes);
}

std::optional<progress_snapshot> progress_page::read(std::string& error) const {
  error.clear();
  progress_words copy;
  // A write is a few hundred nanoseconds: three tries nearly always meet
  // a quiet page; the next read comes soon enough otherwise.
  if (!copy_consistent(words_, copy, 3)) return std::nullopt;
  return decode_progress_page(copy, error);
}

void progress_pages::add(int local_rank, const std::string& path) {
  pages_.erase(local_rank);
  pages_[local_rank] = std::make_unique<progress_page>(path);
}

std::optional<progress_snapshot> progress_pages::read(int local_rank, pid_t pid) const {
  auto it = pages_.find(local_rank);
  if (it == pages_.end()) return std::nullopt;
  std::string error;
  auto snapshot = it->second->read(error);
  if (!snapshot || snapshot->writer_pid != pid) return std::nullopt;
  return snapshot;
}

}  // namespace dtrun::agent
