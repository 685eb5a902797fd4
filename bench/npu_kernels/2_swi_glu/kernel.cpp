#include <cstdint>
#include <cmath>
#include <cstring>

// out[o, j, i] = silu(x[o, j, i]) * x[o, half + j, i], x laid out as [outer, 2 * half, inner]
static inline float silu(float a) { return a / (1.0f + std::exp(-a)); }
static inline float bf16_to_f(uint16_t b) { uint32_t u = uint32_t(b) << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline uint16_t f_to_bf16(float f) {
    uint32_t u; std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);   // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                         // round to nearest even
    return uint16_t(u >> 16);
}

template <typename T, typename Load, typename Store>
static void swiglu(const T* x, T* out, int64_t outer, int64_t half, int64_t inner, Load load, Store store) {
    const int64_t rows = outer * half;
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t o = r / half, j = r % half;
        const T* a = x + (o * 2 * half + j) * inner;
        const T* b = a + half * inner;
        T* y = out + r * inner;
        for (int64_t i = 0; i < inner; ++i) {
            // PyTorch rounds silu(a) to the input's type before the product: so does this
            float s = load(store(silu(load(a[i]))));
            y[i] = store(s * load(b[i]));
        }
    }
}

extern "C" void swiglu_f32(const float* x, float* out, int64_t outer, int64_t half, int64_t inner) {
    swiglu(x, out, outer, half, inner, [](float v) { return v; }, [](float v) { return v; });
}
extern "C" void swiglu_f16(const _Float16* x, _Float16* out, int64_t outer, int64_t half, int64_t inner) {
    swiglu(x, out, outer, half, inner, [](_Float16 v) { return float(v); }, [](float v) { return _Float16(v); });
}
extern "C" void swiglu_bf16(const uint16_t* x, uint16_t* out, int64_t outer, int64_t half, int64_t inner) {
    swiglu(x, out, outer, half, inner, [](uint16_t v) { return bf16_to_f(v); }, [](float v) { return f_to_bf16(v); });
}
