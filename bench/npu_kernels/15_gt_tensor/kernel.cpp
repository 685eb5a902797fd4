#include <cstdint>
#include <cstring>
// x > y elementwise, both of one dtype (its code below), shapes already broadcast to the output's
static inline float from_bf16(uint16_t v) {
    uint32_t bits = (uint32_t)v << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
static inline float from_fp16(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu, bits;
    if (exp == 0x1Fu) {
        bits = sign | 0x7F800000u | (man << 13);                  // inf, nan
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);         // normal
    } else if (man == 0) {
        bits = sign;                                              // zero
    } else {                                                      // subnormal: normalise
        int e = -1;
        do { ++e; man <<= 1; } while ((man & 0x400u) == 0);
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3FFu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
template <typename T>
static void gt_as(const T* x, const T* y, bool* out, int64_t n) {
    #pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > y[i];
}
static void gt_half(const uint16_t* x, const uint16_t* y, bool* out, int64_t n, bool brain) {
    #pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i)
        out[i] = brain ? from_bf16(x[i]) > from_bf16(y[i]) : from_fp16(x[i]) > from_fp16(y[i]);
}
extern "C" void gt_tensor(const void* x, const void* y, bool* out, int64_t n, int32_t code) {
    switch (code) {
        case 0: gt_as((const float*)x, (const float*)y, out, n); break;
        case 1: gt_half((const uint16_t*)x, (const uint16_t*)y, out, n, false); break;
        case 2: gt_half((const uint16_t*)x, (const uint16_t*)y, out, n, true); break;
        case 3: gt_as((const double*)x, (const double*)y, out, n); break;
        case 4: gt_as((const int8_t*)x, (const int8_t*)y, out, n); break;
        case 5: gt_as((const int16_t*)x, (const int16_t*)y, out, n); break;
        case 6: gt_as((const int32_t*)x, (const int32_t*)y, out, n); break;
        case 7: gt_as((const int64_t*)x, (const int64_t*)y, out, n); break;
        case 8: gt_as((const uint8_t*)x, (const uint8_t*)y, out, n); break;
        case 9: gt_as((const uint16_t*)x, (const uint16_t*)y, out, n); break;
        case 10: gt_as((const uint32_t*)x, (const uint32_t*)y, out, n); break;
        case 11: gt_as((const uint64_t*)x, (const uint64_t*)y, out, n); break;
        default: gt_as((const uint8_t*)x, (const uint8_t*)y, out, n); break;   // bool: one byte, 0 or 1
    }
}
