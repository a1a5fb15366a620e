# The portable build's hwloc: libhwloc.a (libhwloc-dev) instead of
# libhwloc.so.15, which Debian 13 no longer has. `pkg-config --static
# --libs hwloc` adds -lm -ludev -lpthread; Debian ships no libudev.a, and
# hwloc only asks udev for attributes of I/O devices (block devices),
# which dtrun never loads, so agent/devices/hwloc_udev_stubs.cpp answers "no udev"
# and hwloc reads sysfs as it does when udev_new() fails. hwloc's plugin
# loader still dlopen()s /usr/lib/*/hwloc/hwloc_*.so (libhwloc-plugins) when
# present; those plugins cannot find hwloc's symbols in a static binary and
# are skipped quietly (docs/building.md).
find_library(DTRUN_HWLOC_STATIC_LIBRARY NAMES libhwloc.a REQUIRED)
add_library(dtrun_udev_stubs STATIC ${PROJECT_SOURCE_DIR}/agent/devices/hwloc_udev_stubs.cpp)
target_link_libraries(dtrun_hwloc INTERFACE
  ${DTRUN_HWLOC_STATIC_LIBRARY} dtrun_udev_stubs m Threads::Threads ${CMAKE_DL_LIBS})
target_include_directories(dtrun_hwloc SYSTEM INTERFACE ${hwloc_INCLUDE_DIRS})
