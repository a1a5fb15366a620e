# Precompiled headers (issue 29): most translation units include Boost.Asio,
# fmt and nlohmann/json, and the tests Catch2's single 17,000-line header;
# parsing those again for each of about 170 files was most of a cold build.
# Each library and test binary precompiles the list once, with its own
# flags (docs/building.md has the measurements).
#
# Off for the clang syntax check (scripts/build clang-check compiles each
# file alone from compile_commands.json, so it also proves that every file
# includes what it uses) and for the fuzzers (no Boost there).
option(DTRUN_PCH "Precompile the heavy third-party headers" ON)

set(dtrun_pch_headers
  <algorithm> <chrono> <functional> <map> <memory> <optional> <string>
  <string_view> <vector>
  <fmt/format.h>
  <nlohmann/json.hpp>
  <boost/asio/io_context.hpp> <boost/asio/ip/tcp.hpp> <boost/asio/post.hpp>
  <boost/asio/steady_timer.hpp>)

# dtrun_precompile(TARGET [EXTRA_HEADER...]): TARGET's files are compiled
# with the list (and EXTRA_HEADER...) precompiled. Not for a target that
# one unity batch compiles whole (most of agent/'s and launcher/'s
# libraries, one per folder): that batch parses the headers once either
# way, and precompiling them first would only add a compile before it.
function(dtrun_precompile target)
  if(NOT DTRUN_PCH)
    return()
  endif()
  get_target_property(sources ${target} SOURCES)
  list(LENGTH sources source_count)
  if(DTRUN_UNITY AND source_count LESS_EQUAL CMAKE_UNITY_BUILD_BATCH_SIZE)
    return()
  endif()
  target_precompile_headers(${target} PRIVATE ${dtrun_pch_headers} ${ARGN})
endfunction()
