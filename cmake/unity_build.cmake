# Unity builds (issue 29): each target's files are compiled in batches, one
# translation unit per batch, so the heavy headers (Asio, Beast,
# nlohmann/json, fmt, Catch2) are parsed and their common templates
# instantiated and code-generated once per batch instead of once per file.
# The launcher library's 20 files took 184 CPU-seconds one by one and 58 in
# two batches (RelWithDebInfo, GCC 12; docs/building.md has the rest).
#
# What a batch asks of the code: file-local helpers (anonymous namespaces,
# static functions) of one target must not share a name, since a batch is
# one file; a file that must see its own macros before any other header
# (agent/process/worker_process.cpp) opts out with SKIP_UNITY_BUILD_INCLUSION.
# Off for the clang syntax check, which compiles each file alone and so
# proves that every file includes what it uses and compiles on its own.
option(DTRUN_UNITY "Compile each target's files in batches (unity build)" ON)
if(DTRUN_UNITY)
  set(CMAKE_UNITY_BUILD ON)
  # 16: few enough batches per library for both cores to stay busy, and a
  # one-line change recompiles one batch (about 30 s), not a whole library.
  if(NOT DEFINED CMAKE_UNITY_BUILD_BATCH_SIZE)
    set(CMAKE_UNITY_BUILD_BATCH_SIZE 16)
  endif()
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC warns when a class with external linkage (a pimpl's impl) has a
    # member whose type is in an anonymous namespace and the class is
    # defined in an #included file, which is what a batch makes of every
    # file; compiled alone, the same code draws no warning.
    add_compile_options(-Wno-subobject-linkage)
  endif()
endif()
