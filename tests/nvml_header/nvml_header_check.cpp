// dtrun's NVML declarations (agent/devices/nvml_api.h, in dtrun::agent::nvml)
// against NVIDIA's nvml.h, at compile time: this file compiles only if
// every entry point dtrun dlsyms exists in the header under that name
// with the same prototype, every structure dtrun reads has the header's
// size, field offsets and field types, and every constant has the
// header's value. It is built where nvml.h was found
// (tests/nvml_header/CMakeLists.txt); nothing runs.
//
// dtrun keeps its own names for NVML's types (device_t for nvmlDevice_t,
// process_info_t for nvmlProcessInfo_t, int for an enum), so each header
// type is first mapped to the type dtrun declares for it (as_dtrun), and
// the mapped prototype must then be the very type of dtrun's pointer.

// The versioned names only (nvmlInit_v2, not a macro nvmlInit), and the
// older entry points dtrun falls back to declared.
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#include <cstddef>
#include <type_traits>

#include "agent/devices/nvml_api.h"

namespace {

namespace nvml = dtrun::agent::nvml;

// An enum passed where dtrun declares an int: the same size and the same
// registers, as long as the values fit (checked below for those used).
template <class E>
constexpr bool enum_is_int_sized = std::is_enum_v<E> && sizeof(E) == sizeof(int);
static_assert(enum_is_int_sized<nvmlReturn_t>);
static_assert(enum_is_int_sized<nvmlEnableState_t>);

// The type dtrun declares for the header's type T.
template <class T>
struct as_dtrun {
  using type = T;  // the C scalars (unsigned int, char, unsigned long long)
};
template <class T>
using as_dtrun_t = typename as_dtrun<T>::type;

template <>
struct as_dtrun<nvmlReturn_t> {
  using type = nvml::return_t;
};
template <>
struct as_dtrun<nvmlEnableState_t> {
  using type = int;
};
template <>
struct as_dtrun<nvmlDevice_t> {
  using type = nvml::device_t;
};
template <>
struct as_dtrun<nvmlEventSet_t> {
  using type = nvml::event_set_t;
};
template <>
struct as_dtrun<nvmlProcessInfo_t> {
  using type = nvml::process_info_t;
};
template <>
struct as_dtrun<nvmlProcessUtilizationSample_t> {
  using type = nvml::process_utilization_sample_t;
};
template <>
struct as_dtrun<nvmlUtilization_t> {
  using type = nvml::utilization_t;
};
template <>
struct as_dtrun<nvmlMemory_t> {
  using type = nvml::memory_t;
};
template <>
struct as_dtrun<nvmlEventData_t> {
  using type = nvml::event_data_t;
};
template <class T>
struct as_dtrun<T*> {
  using type = as_dtrun_t<T>*;
};
template <class T>
struct as_dtrun<const T> {
  using type = const as_dtrun_t<T>;
};
template <class R, class... A>
struct as_dtrun<R (*)(A...)> {
  using type = as_dtrun_t<R> (*)(as_dtrun_t<A>...);
};

// Each entry point: the header's prototype, mapped, is dtrun's pointer.
#define DTRUN_CHECK_ENTRY_POINT(member, symbol)                                   \
  static_assert(std::is_same_v<as_dtrun_t<decltype(&::symbol)>,                   \
                               decltype(nvml::functions::member)>,                \
                "nvml::functions::" #member " is not the prototype of " #symbol \
                " in nvml.h");
DTRUN_NVML_ENTRY_POINTS(DTRUN_CHECK_ENTRY_POINT)
DTRUN_NVML_FALLBACKS(DTRUN_CHECK_ENTRY_POINT)
#undef DTRUN_CHECK_ENTRY_POINT

// Each structure: the same size, and each field dtrun declares at the
// header's offset with the header's type. Every field is listed, so a
// field dtrun lacks shows as a size or an offset that differs.
#define DTRUN_CHECK_SIZE(ours, theirs)         \
  static_assert(sizeof(nvml::ours) == sizeof(theirs), \
                "nvml::" #ours " is not the size of " #theirs);
#define DTRUN_CHECK_FIELD(ours, our_field, theirs, their_field)                              \
  static_assert(offsetof(nvml::ours, our_field) == offsetof(theirs, their_field),            \
                "nvml::" #ours "::" #our_field " is not at the offset of " #their_field);   \
  static_assert(std::is_same_v<decltype(nvml::ours::our_field),                              \
                               as_dtrun_t<decltype(theirs::their_field)>>,                   \
                "nvml::" #ours "::" #our_field " is not the type of " #their_field);

DTRUN_CHECK_SIZE(process_info_t, nvmlProcessInfo_t)
DTRUN_CHECK_FIELD(process_info_t, pid, nvmlProcessInfo_t, pid)
DTRUN_CHECK_FIELD(process_info_t, used_gpu_memory, nvmlProcessInfo_t, usedGpuMemory)
DTRUN_CHECK_FIELD(process_info_t, gpu_instance_id, nvmlProcessInfo_t, gpuInstanceId)
DTRUN_CHECK_FIELD(process_info_t, compute_instance_id, nvmlProcessInfo_t, computeInstanceId)

DTRUN_CHECK_SIZE(process_utilization_sample_t, nvmlProcessUtilizationSample_t)
DTRUN_CHECK_FIELD(process_utilization_sample_t, pid, nvmlProcessUtilizationSample_t, pid)
DTRUN_CHECK_FIELD(process_utilization_sample_t, time_stamp, nvmlProcessUtilizationSample_t,
                  timeStamp)
DTRUN_CHECK_FIELD(process_utilization_sample_t, sm_util, nvmlProcessUtilizationSample_t, smUtil)
DTRUN_CHECK_FIELD(process_utilization_sample_t, mem_util, nvmlProcessUtilizationSample_t, memUtil)
DTRUN_CHECK_FIELD(process_utilization_sample_t, enc_util, nvmlProcessUtilizationSample_t, encUtil)
DTRUN_CHECK_FIELD(process_utilization_sample_t, dec_util, nvmlProcessUtilizationSample_t, decUtil)

DTRUN_CHECK_SIZE(utilization_t, nvmlUtilization_t)
DTRUN_CHECK_FIELD(utilization_t, gpu, nvmlUtilization_t, gpu)
DTRUN_CHECK_FIELD(utilization_t, memory, nvmlUtilization_t, memory)

DTRUN_CHECK_SIZE(memory_t, nvmlMemory_t)
DTRUN_CHECK_FIELD(memory_t, total, nvmlMemory_t, total)
DTRUN_CHECK_FIELD(memory_t, free, nvmlMemory_t, free)
DTRUN_CHECK_FIELD(memory_t, used, nvmlMemory_t, used)

DTRUN_CHECK_SIZE(event_data_t, nvmlEventData_t)
DTRUN_CHECK_FIELD(event_data_t, device, nvmlEventData_t, device)
DTRUN_CHECK_FIELD(event_data_t, event_type, nvmlEventData_t, eventType)
DTRUN_CHECK_FIELD(event_data_t, event_data, nvmlEventData_t, eventData)
DTRUN_CHECK_FIELD(event_data_t, gpu_instance_id, nvmlEventData_t, gpuInstanceId)
DTRUN_CHECK_FIELD(event_data_t, compute_instance_id, nvmlEventData_t, computeInstanceId)
#undef DTRUN_CHECK_SIZE
#undef DTRUN_CHECK_FIELD

// The constants dtrun compares with.
static_assert(nvml::success == static_cast<int>(NVML_SUCCESS));
static_assert(nvml::error_not_supported == static_cast<int>(NVML_ERROR_NOT_SUPPORTED));
static_assert(nvml::error_not_found == static_cast<int>(NVML_ERROR_NOT_FOUND));
static_assert(nvml::error_insufficient_size == static_cast<int>(NVML_ERROR_INSUFFICIENT_SIZE));
static_assert(nvml::error_timeout == static_cast<int>(NVML_ERROR_TIMEOUT));
static_assert(nvml::feature_enabled == static_cast<int>(NVML_FEATURE_ENABLED));
static_assert(nvml::event_type_xid_critical_error ==
              static_cast<unsigned long long>(nvmlEventTypeXidCriticalError));
static_assert(std::is_same_v<nvmlDeviceArchitecture_t, unsigned int>);
static_assert(nvml::architecture_ampere == NVML_DEVICE_ARCH_AMPERE);
static_assert(nvml::architecture_unknown == NVML_DEVICE_ARCH_UNKNOWN);
static_assert(nvml::uuid_buffer_size == NVML_DEVICE_UUID_V2_BUFFER_SIZE);
static_assert(nvml::value_not_available ==
              static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE));

}  // namespace

// The fake library's own transcription (tests/fake_nvml/fake_nvml_types.h),
// compared in the same way; its functions are checked by compiling
// fake_nvml.cpp against nvml.h (FAKE_NVML_WITH_NVML_H).
namespace fake {
#include "fake_nvml/fake_nvml_types.h"
}  // namespace fake

namespace {

// The fake's types are its own (fake::nvmlDevice_st is not
// ::nvmlDevice_st), so a field's size stands for its type.
#define DTRUN_CHECK_FAKE_SIZE(type) \
  static_assert(sizeof(fake::type) == sizeof(::type), "fake " #type " is not the header's size");
#define DTRUN_CHECK_FAKE_FIELD(type, field)                                                   \
  static_assert(offsetof(fake::type, field) == offsetof(::type, field) &&                    \
                    sizeof(fake::type::field) == sizeof(::type::field),                      \
                "fake " #type "::" #field " is not at the header's offset with its size");
DTRUN_CHECK_FAKE_SIZE(nvmlReturn_t)
DTRUN_CHECK_FAKE_SIZE(nvmlEnableState_t)
DTRUN_CHECK_FAKE_SIZE(nvmlDevice_t)
DTRUN_CHECK_FAKE_SIZE(nvmlEventSet_t)
static_assert(std::is_same_v<fake::nvmlDeviceArchitecture_t, ::nvmlDeviceArchitecture_t>);
DTRUN_CHECK_FAKE_SIZE(nvmlMemory_t)
DTRUN_CHECK_FAKE_FIELD(nvmlMemory_t, total)
DTRUN_CHECK_FAKE_FIELD(nvmlMemory_t, free)
DTRUN_CHECK_FAKE_FIELD(nvmlMemory_t, used)
DTRUN_CHECK_FAKE_SIZE(nvmlUtilization_t)
DTRUN_CHECK_FAKE_FIELD(nvmlUtilization_t, gpu)
DTRUN_CHECK_FAKE_FIELD(nvmlUtilization_t, memory)
DTRUN_CHECK_FAKE_SIZE(nvmlProcessInfo_t)
DTRUN_CHECK_FAKE_SIZE(nvmlProcessInfo_v2_t)
DTRUN_CHECK_FAKE_FIELD(nvmlProcessInfo_t, pid)
DTRUN_CHECK_FAKE_FIELD(nvmlProcessInfo_t, usedGpuMemory)
DTRUN_CHECK_FAKE_FIELD(nvmlProcessInfo_t, gpuInstanceId)
DTRUN_CHECK_FAKE_FIELD(nvmlProcessInfo_t, computeInstanceId)
DTRUN_CHECK_FAKE_SIZE(nvmlEventData_t)
DTRUN_CHECK_FAKE_FIELD(nvmlEventData_t, device)
DTRUN_CHECK_FAKE_FIELD(nvmlEventData_t, eventType)
DTRUN_CHECK_FAKE_FIELD(nvmlEventData_t, eventData)
DTRUN_CHECK_FAKE_FIELD(nvmlEventData_t, gpuInstanceId)
DTRUN_CHECK_FAKE_FIELD(nvmlEventData_t, computeInstanceId)
#undef DTRUN_CHECK_FAKE_SIZE
#undef DTRUN_CHECK_FAKE_FIELD

#define DTRUN_CHECK_FAKE_VALUE(name) \
  static_assert(static_cast<long long>(fake::name) == static_cast<long long>(::name), #name);
DTRUN_CHECK_FAKE_VALUE(NVML_SUCCESS)
DTRUN_CHECK_FAKE_VALUE(NVML_ERROR_UNINITIALIZED)
DTRUN_CHECK_FAKE_VALUE(NVML_ERROR_INVALID_ARGUMENT)
DTRUN_CHECK_FAKE_VALUE(NVML_ERROR_NOT_SUPPORTED)
DTRUN_CHECK_FAKE_VALUE(NVML_ERROR_NOT_FOUND)
DTRUN_CHECK_FAKE_VALUE(NVML_ERROR_INSUFFICIENT_SIZE)
DTRUN_CHECK_FAKE_VALUE(NVML_ERROR_TIMEOUT)
DTRUN_CHECK_FAKE_VALUE(NVML_ERROR_UNKNOWN)
DTRUN_CHECK_FAKE_VALUE(NVML_FEATURE_DISABLED)
DTRUN_CHECK_FAKE_VALUE(NVML_FEATURE_ENABLED)
#undef DTRUN_CHECK_FAKE_VALUE

}  // namespace
