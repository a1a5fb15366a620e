// The libudev entry points the static libhwloc.a calls, for the portable
// build (cmake/hwloc_static.cmake): Debian has no libudev.a, and linking
// libudev.so.1 would make dtrun need a library beyond glibc. hwloc uses
// udev only to read attributes of block devices when I/O discovery is on,
// which dtrun never turns on; and it already treats udev_new() returning
// null as "no udev" (it then reads /run/udev and sysfs itself). So each
// stub answers as an absent udev would: nothing created, nothing found.
// The signatures are libudev's (libudev.h, not installed with hwloc's
// -dev package); the structures stay opaque.

extern "C" {

struct udev;
struct udev_device;

struct udev* udev_new(void) { return nullptr; }

struct udev* udev_unref(struct udev*) { return nullptr; }

struct udev_device* udev_device_new_from_subsystem_sysname(struct udev*, const char*,
                                                           const char*) {
  return nullptr;
}

const char* udev_device_get_property_value(struct udev_device*, const char*) { return nullptr; }

struct udev_device* udev_device_unref(struct udev_device*) { return nullptr; }

}  // extern "C"
