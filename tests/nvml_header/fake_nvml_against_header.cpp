// The fake libnvidia-ml.so.1 (tests/fake_nvml) compiled against NVIDIA's
// nvml.h instead of its own transcription: each function it exports is
// declared there too, so a parameter or return type that differs from
// NVML's prototype is a conflicting declaration, and the build fails.
#define FAKE_NVML_WITH_NVML_H
#include "fake_nvml/fake_nvml.cpp"
