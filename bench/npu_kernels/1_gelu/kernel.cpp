#include <cstdint>
#include <cmath>
#include <cstring>

static inline float gelu_erf(float v) { return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f)); }
static inline float gelu_tanh(float v) {
    return 0.5f * v * (1.0f + std::tanh(0.79788456080286536f * (v + 0.044715f * v * v * v)));
}
static inline float bf16_to_f(uint16_t b) { uint32_t u = uint32_t(b) << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline uint16_t f_to_bf16(float f) {
    uint32_t u; std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);   // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                         // round to nearest even
    return uint16_t(u >> 16);
}

extern "C" void gelu_f32(const float* x, float* out, int64_t n, int64_t tanh_form) {
    if (tanh_form) {
        #pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) out[i] = gelu_tanh(x[i]);
    } else {
        #pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) out[i] = gelu_erf(x[i]);
    }
}
extern "C" void gelu_f16(const _Float16* x, _Float16* out, int64_t n, int64_t tanh_form) {
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        float v = float(x[i]);
        out[i] = _Float16(tanh_form ? gelu_tanh(v) : gelu_erf(v));
    }
}
extern "C" void gelu_bf16(const uint16_t* x, uint16_t* out, int64_t n, int64_t tanh_form) {
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        float v = bf16_to_f(x[i]);
        out[i] = f_to_bf16(tanh_form ? gelu_tanh(v) : gelu_erf(v));
    }
}
