#include <cstdint>
#include <cmath>
extern "C" void abs_f32(const float* x, float* out, int64_t n) {
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = std::fabs(x[i]);
}
// float16 and bfloat16 alike: the sign is the top bit
extern "C" void abs_16(const uint16_t* x, uint16_t* out, int64_t n) {
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] & 0x7FFFu;
}
