#include "agent/watch/progress_page.h"

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "agent/python/python_hook.h"

namespace dtrun::agent::progress_page_test {
namespace layout = progress_layout;
namespace fs = std::filesystem;

namespace {

void name_slot(progress_words& page, std::size_t slot, const char* name) {
  std::memcpy(&page[layout::sections + slot * layout::section_words], name, std::strlen(name));
  page[layout::w_named] = std::max<std::int64_t>(page[layout::w_named], static_cast<std::int64_t>(slot) + 1);
}

void close_interval(progress_words& page, std::size_t slot, std::int64_t interval) {
  std::size_t base = layout::sections + slot * layout::section_words + layout::name_words;
  auto count = ++page[base];
  page[base + 1 + static_cast<std::size_t>(count - 1) % layout::interval_ring] = interval;
}

}  // namespace

TEST_CASE("progress_page: a new page has no step and no section but knows the step slot") {
  std::string error;
  auto s = decode_progress_page(empty_progress_page(), error);
  REQUIRE(s);
  CHECK(error.empty());
  CHECK_FALSE(s->step);
  CHECK_FALSE(s->current);
  CHECK_FALSE(s->current_name());
  CHECK(s->writer_pid == 0);
  REQUIRE(s->sections.size() == 1);
  CHECK(s->sections[0].name == "step");
  CHECK(s->recent_steps.empty());
}

TEST_CASE("progress_page: another magic or version is refused in one line") {
  std::string error;
  auto page = empty_progress_page();
  page[layout::w_magic] = 42;
  CHECK_FALSE(decode_progress_page(page, error));
  CHECK(error == "not a dtrun progress page (bad magic)");
  page = empty_progress_page();
  page[layout::w_version] = 2;
  CHECK_FALSE(decode_progress_page(page, error));
  CHECK(error == "progress page version 2, this dtrun reads version 1");
}

TEST_CASE("progress_page: the rings keep the last steps and intervals, oldest first") {
  auto page = empty_progress_page();
  page[layout::w_writer_pid] = 1234;
  for (std::int64_t k = 1; k <= 20; ++k) {
    std::size_t at = layout::step_ring +
                     static_cast<std::size_t>(k - 1) % layout::step_ring_entries * layout::step_entry_words;
    page[at] = k - 1;
    page[at + 1] = k * 100;
    page[at + 2] = k * 100 + 90;
    close_interval(page, 0, k * 1000);
  }
  page[layout::w_steps_done] = 20;
  page[layout::w_step] = 20;
  name_slot(page, 1, "checkpoint");
  close_interval(page, 1, 5);
  page[layout::w_current] = 1;
  page[layout::w_current_since] = 777;
  page[layout::w_depth] = 1;
  std::string error;
  auto s = decode_progress_page(page, error);
  REQUIRE(s);
  CHECK(s->writer_pid == 1234);
  CHECK(s->step == 20);
  REQUIRE(s->recent_steps.size() == 16);
  CHECK(s->recent_steps.front().step == 4);
  CHECK(s->recent_steps.back().step == 19);
  CHECK(s->recent_steps.back().end_ns - s->recent_steps.back().start_ns == 90);
  REQUIRE(s->sections.size() == 2);
  CHECK(s->sections[0].count == 20);
  CHECK(s->sections[0].recent == std::vector<std::int64_t>{13000, 14000, 15000, 16000, 17000,
                                                           18000, 19000, 20000});
  CHECK(s->sections[1].name == "checkpoint");
  CHECK(s->sections[1].recent == std::vector<std::int64_t>{5});
  CHECK(s->current_name() == "checkpoint");
  CHECK(s->current_since_ns == 777);
  CHECK(s->depth == 1);
}

TEST_CASE("progress_page: a section slot out of range or unnamed is no section") {
  auto page = empty_progress_page();
  page[layout::w_current] = 7;  // only slot 0 is named
  std::string error;
  auto s = decode_progress_page(page, error);
  REQUIRE(s);
  CHECK_FALSE(s->current);
  page[layout::w_named] = 1000;  // more than there are slots: clamped
  s = decode_progress_page(page, error);
  REQUIRE(s);
  CHECK(s->sections.size() == layout::section_slots);
}

TEST_CASE("progress_page: a page being written is not copied") {
  auto page = empty_progress_page();
  page[layout::w_sequence] = 3;  // odd: a write is under way
  progress_words copy{};
  CHECK_FALSE(copy_consistent(page.data(), copy, 5));
  page[layout::w_sequence] = 4;
  CHECK(copy_consistent(page.data(), copy, 1));
  CHECK(copy == page);
}

// The writer's protocol, as dtrun.py follows it, racing a reader: every
// copy the reader accepts holds one whole update (step k with start 3k).
TEST_CASE("progress_page: a reader racing the writer never sees half an update") {
  alignas(64) static progress_words shared = empty_progress_page();
  auto word = [](std::size_t i) { return std::atomic_ref<std::int64_t>(shared[i]); };
  constexpr std::int64_t updates = 200000;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (std::int64_t k = 1; k <= updates; ++k) {
      auto seq = word(layout::w_sequence).load(std::memory_order_relaxed);
      word(layout::w_sequence).store(seq + 1, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_release);
      word(layout::w_step).store(k, std::memory_order_relaxed);
      word(layout::w_step_start).store(3 * k, std::memory_order_relaxed);
      word(layout::w_sequence).store(seq + 2, std::memory_order_release);
    }
    done = true;
  });
  std::int64_t accepted = 0;
  std::int64_t torn = 0;
  std::int64_t last = -1;  // the empty page's step
  while (!done || accepted == 0) {
    progress_words copy{};
    if (!copy_consistent(shared.data(), copy, 1)) continue;
    ++accepted;
    if (copy[layout::w_step] >= 0 && copy[layout::w_step_start] != 3 * copy[layout::w_step]) ++torn;
    if (copy[layout::w_step] < last) ++torn;  // never backwards
    last = copy[layout::w_step];
  }
  writer.join();
  CHECK(torn == 0);
  CHECK(accepted > 0);
}

TEST_CASE("progress_page: the agent's page file is the empty page, mapped") {
  auto dir = fs::temp_directory_path() / fmt::format("dtrun-page-test-{}", ::getpid());
  fs::create_directories(dir);
  std::string path = (dir / "progress_page").string();
  {
    progress_page page(path);
    CHECK(fs::file_size(path) == layout::page_bytes);
    std::string error;
    auto s = page.read(error);
    REQUIRE(s);
    CHECK_FALSE(s->step);
    progress_pages pages;
    pages.add(0, (dir / "other").string());
    CHECK_FALSE(pages.read(0, 1234));  // nobody attached: pid 0 is not 1234
    CHECK_FALSE(pages.read(1, 1234));  // no page for local rank 1
  }
  fs::remove_all(dir);
  CHECK_THROWS_WITH(progress_page((dir / "missing" / "page").string()),
                    Catch::Contains("cannot create the progress page"));
}

// dtrun.py writes the offsets this header reads.
TEST_CASE("progress_page: the Python module's layout constants are the header's") {
  std::string module = dtrun_module_source();
  CHECK_THAT(module, Catch::Contains(fmt::format("_MAGIC = 0x{:X}", layout::magic)));
  CHECK_THAT(module, Catch::Contains(fmt::format("_VERSION = {}\n", layout::version)));
  CHECK_THAT(module, Catch::Contains(fmt::format("_PAGE_BYTES = {}\n", layout::page_bytes)));
  CHECK_THAT(module, Catch::Contains(fmt::format(
                         "_W_WRITER_PID, _W_SEQUENCE, _W_STEP, _W_STEP_START, _W_STEPS_DONE = "
                         "{}, {}, {}, {}, {}\n",
                         layout::w_writer_pid, layout::w_sequence, layout::w_step,
                         layout::w_step_start, layout::w_steps_done)));
  CHECK_THAT(module, Catch::Contains(fmt::format(
                         "_W_CURRENT, _W_CURRENT_SINCE, _W_DEPTH, _W_NAMED = {}, {}, {}, {}\n",
                         layout::w_current, layout::w_current_since, layout::w_depth,
                         layout::w_named)));
  CHECK_THAT(module, Catch::Contains(fmt::format(
                         "_STEP_RING, _STEP_RING_ENTRIES, _STEP_ENTRY_WORDS = {}, {}, {}\n",
                         layout::step_ring, layout::step_ring_entries, layout::step_entry_words)));
  CHECK_THAT(module, Catch::Contains(fmt::format(
                         "_SECTIONS, _SECTION_SLOTS, _SECTION_WORDS = {}, {}, {}\n",
                         layout::sections, layout::section_slots, layout::section_words)));
  CHECK_THAT(module, Catch::Contains(fmt::format(
                         "_NAME_BYTES, _NAME_WORDS, _INTERVAL_RING = {}, {}, {}\n",
                         layout::name_bytes, layout::name_words, layout::interval_ring)));
}

}  // namespace dtrun::agent::progress_page_test
