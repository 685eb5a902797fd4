// Stand-in (written from the CANN documentation, not copied): the graph engine's basic types that op_host
// code uses: status codes, data types, formats, AscendString, ge::Shape, ge::Operator.
#ifndef EVOKERNEL_STUB_GRAPH_TYPES_H
#define EVOKERNEL_STUB_GRAPH_TYPES_H
#include <cstddef>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ge {
using char_t = char;
using float32_t = float;
using graphStatus = uint32_t;
const int64_t UNKNOWN_DIM = -1;
const int64_t UNKNOWN_DIM_NUM = -2;
const std::vector<int64_t> UNKNOWN_SHAPE = {-1};
const std::vector<int64_t> UNKNOWN_RANK = {-2};
const graphStatus GRAPH_SUCCESS = 0;
const graphStatus GRAPH_FAILED = 0xFFFFFFFFU;
const graphStatus GRAPH_PARAM_INVALID = 50331649U;
const graphStatus GRAPH_NOT_CHANGED = 1343242304U;

enum DataType {
    DT_FLOAT = 0, DT_FLOAT16, DT_INT8, DT_INT32, DT_UINT8, DT_INT16 = 6, DT_UINT16, DT_UINT32, DT_INT64, DT_UINT64,
    DT_DOUBLE, DT_BOOL, DT_STRING, DT_DUAL_SUB_INT8, DT_DUAL_SUB_UINT8, DT_COMPLEX64, DT_COMPLEX128, DT_QINT8,
    DT_QINT16, DT_QINT32, DT_QUINT8, DT_QUINT16, DT_RESOURCE, DT_STRING_REF, DT_DUAL, DT_VARIANT, DT_BF16,
    DT_UNDEFINED, DT_INT4, DT_UINT1, DT_INT2, DT_UINT2, DT_COMPLEX32, DT_HIFLOAT8, DT_FLOAT8_E5M2, DT_FLOAT8_E4M3FN,
    DT_FLOAT8_E8M0, DT_FLOAT6_E3M2, DT_FLOAT6_E2M3, DT_FLOAT4_E2M1, DT_FLOAT4_E1M2, DT_MAX
};

enum Format {
    FORMAT_NCHW = 0, FORMAT_NHWC, FORMAT_ND, FORMAT_NC1HWC0, FORMAT_FRACTAL_Z, FORMAT_NC1C0HWPAD, FORMAT_NHWC1C0,
    FORMAT_FSR_NCHW, FORMAT_FRACTAL_DECONV, FORMAT_C1HWNC0, FORMAT_FRACTAL_DECONV_TRANSPOSE,
    FORMAT_FRACTAL_DECONV_SP_STRIDE_TRANS, FORMAT_NC1HWC0_C04, FORMAT_FRACTAL_Z_C04, FORMAT_CHWN,
    FORMAT_FRACTAL_DECONV_SP_STRIDE8_TRANS, FORMAT_HWCN, FORMAT_NC1KHKWHWC0, FORMAT_BN_WEIGHT, FORMAT_FILTER_HWCK,
    FORMAT_HASHTABLE_LOOKUP_LOOKUPS, FORMAT_HASHTABLE_LOOKUP_KEYS, FORMAT_HASHTABLE_LOOKUP_VALUE,
    FORMAT_HASHTABLE_LOOKUP_OUTPUT, FORMAT_HASHTABLE_LOOKUP_HITS, FORMAT_C1HWNCoC0, FORMAT_MD, FORMAT_NDHWC,
    FORMAT_FRACTAL_ZZ, FORMAT_FRACTAL_NZ, FORMAT_NCDHW, FORMAT_DHWCN, FORMAT_NDC1HWC0, FORMAT_FRACTAL_Z_3D,
    FORMAT_CN, FORMAT_NC, FORMAT_DHWNC, FORMAT_FRACTAL_Z_3D_TRANSPOSE, FORMAT_FRACTAL_ZN_LSTM, FORMAT_FRACTAL_Z_G,
    FORMAT_RESERVED, FORMAT_ALL, FORMAT_NULL, FORMAT_ND_RNN_BIAS, FORMAT_FRACTAL_ZN_RNN, FORMAT_NYUV,
    FORMAT_NYUV_A, FORMAT_NCL, FORMAT_FRACTAL_Z_WINO, FORMAT_C1HWC0, FORMAT_FRACTAL_NZ_C0_16,
    FORMAT_FRACTAL_NZ_C0_32, FORMAT_MAX
};

// bytes of one element (ge::GetSizeByDataType); a negative value for types without one
int32_t GetSizeByDataType(DataType data_type);

class AscendString {
public:
    AscendString() = default;
    AscendString(const char_t* name);      // NOLINT: implicit, as documented
    const char_t* GetString() const;
    size_t GetLength() const;
    bool operator<(const AscendString& other) const;
    bool operator==(const AscendString& other) const;
};

class Shape {
public:
    Shape();
    explicit Shape(const std::vector<int64_t>& dims);
    size_t GetDimNum() const;
    int64_t GetDim(size_t idx) const;
    graphStatus SetDim(size_t idx, int64_t value);
    std::vector<int64_t> GetDims() const;
    int64_t GetShapeSize() const;
};

class TensorDesc {
public:
    Shape GetShape() const;
    DataType GetDataType() const;
    Format GetFormat() const;
    Shape GetOriginShape() const;
    Format GetOriginFormat() const;
};

class Operator {
public:
    TensorDesc GetInputDescByName(const char_t* name) const;
    TensorDesc GetOutputDescByName(const char_t* name) const;
    graphStatus GetAttr(const char_t* name, int64_t& attr_value) const;
    graphStatus GetAttr(const char_t* name, float32_t& attr_value) const;
    graphStatus GetAttr(const char_t* name, bool& attr_value) const;
    graphStatus GetAttr(const char_t* name, AscendString& attr_value) const;
    graphStatus GetAttr(const char_t* name, std::vector<int64_t>& attr_value) const;
    graphStatus GetName(AscendString& name) const;
    graphStatus GetOpType(AscendString& type) const;
};
}  // namespace ge
#endif
