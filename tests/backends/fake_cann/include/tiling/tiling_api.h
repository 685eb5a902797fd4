// Stand-in (written from the CANN documentation of the high-level API tiling interfaces, not copied): the
// matmul tiling builder (matmul_tiling::MatmulApiTiling, MultiCoreMatmulTiling, BatchMatmulTiling), the tiling
// structs a tiling data class nests (TCubeTiling, SoftMaxTiling, LayerNormTiling ...) and the temporary-buffer
// and tiling functions of the softmax, layer norm and elementwise high-level APIs.
#ifndef EVOKERNEL_STUB_TILING_API_H
#define EVOKERNEL_STUB_TILING_API_H
#include <cstdint>
#include <vector>
#include "graph/types.h"
#include "register/tilingdata_base.h"
#include "tiling/platform/platform_ascendc.h"

namespace optiling {
BEGIN_TILING_DATA_DEF(TCubeTiling)
    TILING_DATA_FIELD_DEF(int32_t, usedCoreNum);
    TILING_DATA_FIELD_DEF(int32_t, M);
    TILING_DATA_FIELD_DEF(int32_t, N);
    TILING_DATA_FIELD_DEF(int32_t, Ka);
    TILING_DATA_FIELD_DEF(int32_t, Kb);
    TILING_DATA_FIELD_DEF(int32_t, singleCoreM);
    TILING_DATA_FIELD_DEF(int32_t, singleCoreN);
    TILING_DATA_FIELD_DEF(int32_t, singleCoreK);
    TILING_DATA_FIELD_DEF(int32_t, baseM);
    TILING_DATA_FIELD_DEF(int32_t, baseN);
    TILING_DATA_FIELD_DEF(int32_t, baseK);
    TILING_DATA_FIELD_DEF(int32_t, depthA1);
    TILING_DATA_FIELD_DEF(int32_t, depthB1);
    TILING_DATA_FIELD_DEF(int32_t, stepM);
    TILING_DATA_FIELD_DEF(int32_t, stepN);
    TILING_DATA_FIELD_DEF(int32_t, isBias);
    TILING_DATA_FIELD_DEF(int32_t, transLength);
    TILING_DATA_FIELD_DEF(int32_t, iterateOrder);
    TILING_DATA_FIELD_DEF(int32_t, shareMode);
    TILING_DATA_FIELD_DEF(int32_t, shareL1Size);
    TILING_DATA_FIELD_DEF(int32_t, shareL0CSize);
    TILING_DATA_FIELD_DEF(int32_t, shareUbSize);
    TILING_DATA_FIELD_DEF(int32_t, batchM);
    TILING_DATA_FIELD_DEF(int32_t, batchN);
    TILING_DATA_FIELD_DEF(int32_t, singleBatchM);
    TILING_DATA_FIELD_DEF(int32_t, singleBatchN);
    TILING_DATA_FIELD_DEF(int32_t, stepKa);
    TILING_DATA_FIELD_DEF(int32_t, stepKb);
    TILING_DATA_FIELD_DEF(int32_t, dbL0A);
    TILING_DATA_FIELD_DEF(int32_t, dbL0B);
    TILING_DATA_FIELD_DEF(int32_t, dbL0C);
END_TILING_DATA_DEF;

BEGIN_TILING_DATA_DEF(SoftMaxTiling)
    TILING_DATA_FIELD_DEF(uint32_t, srcM);
    TILING_DATA_FIELD_DEF(uint32_t, srcK);
    TILING_DATA_FIELD_DEF(uint32_t, srcSize);
    TILING_DATA_FIELD_DEF(uint32_t, outMaxM);
    TILING_DATA_FIELD_DEF(uint32_t, outMaxK);
    TILING_DATA_FIELD_DEF(uint32_t, outMaxSize);
    TILING_DATA_FIELD_DEF(uint32_t, splitM);
    TILING_DATA_FIELD_DEF(uint32_t, splitK);
    TILING_DATA_FIELD_DEF(uint32_t, splitSize);
    TILING_DATA_FIELD_DEF(uint32_t, reduceM);
    TILING_DATA_FIELD_DEF(uint32_t, reduceK);
    TILING_DATA_FIELD_DEF(uint32_t, reduceSize);
    TILING_DATA_FIELD_DEF(uint32_t, rangeM);
    TILING_DATA_FIELD_DEF(uint32_t, tailM);
    TILING_DATA_FIELD_DEF(uint32_t, tailSplitSize);
    TILING_DATA_FIELD_DEF(uint32_t, tailReduceSize);
END_TILING_DATA_DEF;

BEGIN_TILING_DATA_DEF(LayerNormTiling)
    TILING_DATA_FIELD_DEF(uint32_t, bLength);
    TILING_DATA_FIELD_DEF(uint32_t, sLength);
    TILING_DATA_FIELD_DEF(uint32_t, hLength);
    TILING_DATA_FIELD_DEF(uint32_t, originalHLength);
    TILING_DATA_FIELD_DEF(uint32_t, inputXSize);
    TILING_DATA_FIELD_DEF(uint32_t, meanVarSize);
    TILING_DATA_FIELD_DEF(uint32_t, numberOfTmpBuf);
    TILING_DATA_FIELD_DEF(uint32_t, loopRound);
    TILING_DATA_FIELD_DEF(uint32_t, inputTailSize);
    TILING_DATA_FIELD_DEF(uint32_t, inputTailPos);
    TILING_DATA_FIELD_DEF(uint32_t, meanVarTailSize);
    TILING_DATA_FIELD_DEF(uint32_t, meanVarTailPos);
    TILING_DATA_FIELD_DEF(uint32_t, bshCurLength);
    TILING_DATA_FIELD_DEF(uint32_t, bsCurLength);
    TILING_DATA_FIELD_DEF(float, lastDimValueBack);
END_TILING_DATA_DEF;
}  // namespace optiling

namespace matmul_tiling {
enum class TPosition : int32_t { GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, LCM = VECCALC, SPM,
                                  SHM = SPM, TSCM, MAX };
enum class CubeFormat : int32_t { ND = 0, NZ, ZN, ZZ, NN, ND_ALIGN, SCALAR, VECTOR };
enum class DataType : int32_t { DT_FLOAT = 0, DT_FLOAT16 = 1, DT_INT8 = 2, DT_INT32 = 3, DT_UINT8 = 4,
                                DT_INT16 = 6, DT_UINT16 = 7, DT_UINT32 = 8, DT_INT64 = 9, DT_UINT64 = 10,
                                DT_DOUBLE = 11, DT_BOOL = 12, DT_STRING = 13, DT_BF16 = 27, DT_INT4 = 29,
                                DT_BFLOAT16 = 27, DT_MAX };
enum class MatrixTraverse : int32_t { NOSET = 0, FIRSTM = 1, FIRSTN = 2 };
enum class MatrixMadType : int32_t { NORMAL = 0, HF32 = 1 };
enum class DequantType : int32_t { SCALAR = 0, TENSOR = 1 };
enum class ScheduleType : int32_t { INNER_PRODUCT = 0, OUTER_PRODUCT = 1 };

class MatmulApiTilingBase {
public:
    MatmulApiTilingBase();
    explicit MatmulApiTilingBase(const platform_ascendc::PlatformAscendC& ascendc_platform);
    virtual ~MatmulApiTilingBase();
    int32_t SetAType(TPosition pos, CubeFormat type, DataType data_type, bool is_trans = false);
    int32_t SetBType(TPosition pos, CubeFormat type, DataType data_type, bool is_trans = false);
    int32_t SetCType(TPosition pos, CubeFormat type, DataType data_type);
    int32_t SetBiasType(TPosition pos, CubeFormat type, DataType data_type);
    int32_t SetDequantType(DequantType dequant_type);
    int32_t SetShape(int32_t m, int32_t n, int32_t k);
    int32_t SetOrgShape(int32_t org_m, int32_t org_n, int32_t org_k);
    int32_t SetOrgShape(int32_t org_m, int32_t org_n, int32_t org_ka, int32_t org_kb);
    int32_t SetALayout(int32_t b, int32_t s, int32_t n, int32_t g, int32_t d);
    int32_t SetBLayout(int32_t b, int32_t s, int32_t n, int32_t g, int32_t d);
    int32_t SetCLayout(int32_t b, int32_t s, int32_t n, int32_t g, int32_t d);
    int32_t SetBatchNum(int32_t batch);
    int32_t SetBias(bool is_bias_in = false);
    int32_t SetFixSplit(int32_t base_m = -1, int32_t base_n = -1, int32_t base_k = -1);
    int32_t SetBufferSpace(int32_t l1_size = -1, int32_t l0c_size = -1, int32_t ub_size = -1, int32_t bt_size = -1);
    int32_t SetTraverse(MatrixTraverse traverse);
    int32_t SetMadType(MatrixMadType mad_type);
    int32_t SetSplitRange(int32_t max_base_m = -1, int32_t max_base_n = -1, int32_t max_base_k = -1,
                          int32_t min_base_m = -1, int32_t min_base_n = -1, int32_t min_base_k = -1);
    int32_t SetDoubleBuffer(bool a, bool b, bool c, bool bias, bool trans_nd2nz = true, bool trans_nz2nd = true);
    int32_t SetMatmulConfigParams(int32_t mm_config_type = 1, bool enable_l1_cache_ub = false,
                                  ScheduleType schedule_type = ScheduleType::INNER_PRODUCT,
                                  MatrixTraverse traverse = MatrixTraverse::NOSET);
    virtual int64_t GetTiling(optiling::TCubeTiling& tiling) = 0;
};

class MatmulApiTiling : public MatmulApiTilingBase {
public:
    MatmulApiTiling();
    explicit MatmulApiTiling(const platform_ascendc::PlatformAscendC& ascendc_platform);
    int64_t GetTiling(optiling::TCubeTiling& tiling) override;
};

class MultiCoreMatmulTiling : public MatmulApiTilingBase {
public:
    MultiCoreMatmulTiling();
    explicit MultiCoreMatmulTiling(const platform_ascendc::PlatformAscendC& ascendc_platform);
    int32_t SetDim(int32_t dim);
    int32_t SetSingleShape(int32_t single_m = -1, int32_t single_n = -1, int32_t single_k = -1);
    int32_t SetSingleRange(int32_t max_m = -1, int32_t max_n = -1, int32_t max_k = -1, int32_t min_m = -1,
                           int32_t min_n = -1, int32_t min_k = -1);
    int32_t GetSingleShape(int32_t& single_m, int32_t& single_n, int32_t& single_k);
    int32_t GetCoreNum(int32_t& dim, int32_t& m_dim, int32_t& n_dim);
    int32_t EnableMultiCoreSplitK(bool flag);
    int64_t GetTiling(optiling::TCubeTiling& tiling) override;
};

class BatchMatmulTiling : public MatmulApiTilingBase {
public:
    BatchMatmulTiling();
    explicit BatchMatmulTiling(const platform_ascendc::PlatformAscendC& ascendc_platform);
    int64_t GetTiling(optiling::TCubeTiling& tiling) override;
};
}  // namespace matmul_tiling

namespace AscendC {
uint32_t GetSoftMaxMaxTmpSize(const ge::Shape& src_shape, const uint32_t data_type_size, const bool is_reuse_source);
uint32_t GetSoftMaxMinTmpSize(const ge::Shape& src_shape, const uint32_t data_type_size, const bool is_reuse_source);
void SoftMaxTilingFunc(const ge::Shape& src_shape, const uint32_t data_type_size, const uint32_t local_work_space_size,
                       optiling::SoftMaxTiling& soft_max_tiling);
uint32_t GetSoftMaxGradMaxTmpSize(const ge::Shape& src_shape, const uint32_t data_type_size, const bool is_front,
                                  const bool is_reuse_source);
uint32_t GetSoftMaxGradMinTmpSize(const ge::Shape& src_shape, const uint32_t data_type_size, const bool is_front,
                                  const bool is_reuse_source);
void SoftMaxGradTilingFunc(const ge::Shape& src_shape, const uint32_t data_type_size,
                           const uint32_t local_work_space_size, optiling::SoftMaxTiling& soft_max_grad_tiling,
                           const bool is_front = false);
uint32_t GetSoftMaxFlashV2MaxTmpSize(const ge::Shape& src_shape, const uint32_t data_type_size1,
                                     const uint32_t data_type_size2, const bool is_update,
                                     const bool is_basic_block = false, const bool is_flash_output_brc = false);
uint32_t GetSoftMaxFlashV2MinTmpSize(const ge::Shape& src_shape, const uint32_t data_type_size1,
                                     const uint32_t data_type_size2, const bool is_update,
                                     const bool is_basic_block = false, const bool is_flash_output_brc = false);
void SoftMaxFlashV2TilingFunc(const ge::Shape& src_shape, const uint32_t data_type_size1,
                              const uint32_t data_type_size2, const uint32_t local_work_space_size,
                              optiling::SoftMaxTiling& soft_max_flash_tiling, const bool is_update,
                              const bool is_basic_block = false, const bool is_flash_output_brc = false);
void GetLayerNormMaxMinTmpSize(const ge::Shape& src_shape, const uint32_t type_size, const bool is_reuse_source,
                               uint32_t& max_value, uint32_t& min_value);
void GetLayerNormNDTillingInfo(const ge::Shape& src_shape, const uint32_t stack_buffer_size,
                               const uint32_t type_size, const bool is_reuse_source,
                               optiling::LayerNormTiling& tilling);
void GetSigmoidMaxMinTmpSize(const ge::Shape& src_shape, const uint32_t type_size, const bool is_reuse_source,
                             uint32_t& max_value, uint32_t& min_value);
void GetMeanMaxMinTmpSize(const uint32_t n, const uint32_t src_type_size, const uint32_t acc_type_size,
                          const bool is_reuse_source, uint32_t& max_size, uint32_t& min_size);
}  // namespace AscendC
#endif
