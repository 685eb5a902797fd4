// Stand-in (written from the CANN documentation, not copied): the runtime registration of an op's
// implementation functions, gert::OpImplRegisterV2 and the IMPL_OP_* macros (one static registrar per use).
#ifndef EVOKERNEL_STUB_OP_IMPL_REGISTRY_H
#define EVOKERNEL_STUB_OP_IMPL_REGISTRY_H
#include <initializer_list>
#include "exe_graph/runtime/tiling_context.h"
#include "graph/types.h"

namespace gert {
class OpImplRegisterV2 {
public:
    using InferShapeKernelFunc = ge::graphStatus (*)(InferShapeContext*);
    using InferShapeRangeKernelFunc = ge::graphStatus (*)(InferShapeRangeContext*);
    using InferDataTypeKernelFunc = ge::graphStatus (*)(InferDataTypeContext*);
    using TilingKernelFunc = ge::graphStatus (*)(TilingContext*);
    using TilingParseFunc = ge::graphStatus (*)(TilingParseContext*);
    explicit OpImplRegisterV2(const ge::char_t* op_type);
    OpImplRegisterV2(const OpImplRegisterV2& other);
    OpImplRegisterV2& InferShape(InferShapeKernelFunc infer_shape_func);
    OpImplRegisterV2& InferShapeRange(InferShapeRangeKernelFunc infer_shape_range_func);
    OpImplRegisterV2& InferDataType(InferDataTypeKernelFunc infer_datatype_func);
    OpImplRegisterV2& Tiling(TilingKernelFunc tiling_func, size_t max_tiling_data_size = 2048);
    template <typename T> OpImplRegisterV2& TilingParse(TilingParseFunc tiling_parse_func);
    OpImplRegisterV2& InputsDataDependency(std::initializer_list<int32_t> inputs);
    OpImplRegisterV2& TilingInputsDataDependency(std::initializer_list<int32_t> inputs);
    OpImplRegisterV2& OutputShapeDependOnCompute(std::initializer_list<int32_t> outputs);
    OpImplRegisterV2& PrivateAttr(const ge::char_t* private_attr);
    OpImplRegisterV2& PrivateAttr(const ge::char_t* private_attr, int64_t private_attr_val);
    OpImplRegisterV2& PrivateAttr(const ge::char_t* private_attr, float private_attr_val);
    OpImplRegisterV2& PrivateAttr(const ge::char_t* private_attr, bool private_attr_val);
    OpImplRegisterV2& PrivateAttr(const ge::char_t* private_attr, const ge::char_t* private_attr_val);
};
}  // namespace gert

#define EVOKERNEL_STUB_CAT2(a, b) a##b
#define EVOKERNEL_STUB_CAT(a, b) EVOKERNEL_STUB_CAT2(a, b)
#define IMPL_OP(op_type) \
    static gert::OpImplRegisterV2 EVOKERNEL_STUB_CAT(g_impl_##op_type##_, __COUNTER__) = gert::OpImplRegisterV2(#op_type)
#define IMPL_OP_INFERSHAPE(op_type) IMPL_OP(op_type)
#define IMPL_OP_OPTILING(op_type) IMPL_OP(op_type)
#define IMPL_OP_DEFAULT() IMPL_OP(DefaultImpl)
#endif
