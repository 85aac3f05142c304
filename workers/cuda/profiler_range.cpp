// Starts and stops the device profiler's collection (cudaProfilerStart / Stop) around a region of interest.

#include <cuda_profiler_api.h>

#include "kernels/cuda_check.hpp"

namespace zmoe {

void cuda_profiler_range(bool on) { ZMOE_CUDA_CHECK(on ? cudaProfilerStart() : cudaProfilerStop()); }

}  // namespace zmoe
