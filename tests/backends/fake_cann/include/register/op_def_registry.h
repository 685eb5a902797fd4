// Stand-in (written from the CANN documentation, not copied): the op prototype registration of an Ascend C
// custom op, the OpDef builder (Input/Output/Attr chains, AICore configuration, inference functions) and
// OP_ADD, which defines one `static int g_<Op>_added` in its translation unit.
#ifndef EVOKERNEL_STUB_OP_DEF_REGISTRY_H
#define EVOKERNEL_STUB_OP_DEF_REGISTRY_H
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include "exe_graph/runtime/tiling_context.h"
#include "graph/types.h"
#include "register/op_impl_registry.h"

namespace optiling {
using OP_CHECK_FUNC = ge::graphStatus (*)(const ge::Operator& op, ge::AscendString& result);
using PARAM_GENERALIZE_FUNC = ge::graphStatus (*)(const ge::Operator& op, const ge::AscendString& generalize_config,
                                                  ge::AscendString& generalized_op_params);
}  // namespace optiling

namespace ops {
enum Option { IGNORE = 0, OPTIONAL = 1, REQUIRED = 2, DYNAMIC = 3, VIRTUAL = 4 };
enum class DependScope : uint32_t { ALL = 0, TILING = 1, INVALID_SCOPE };
enum class FollowType : uint32_t { ALL = 0, DTYPE = 1, FORMAT = 2, SHAPE = 3, INVALID_TYPE };
enum class FormatCheckOption : uint32_t { DEFAULT = 0, STRICT = 1, MAX };
enum class CommentSection : uint32_t { BRIEF = 0, CONSTRAINTS, RESTRICTIONS, SEE, THIRDPARTYFWKCOMPAT,
                                       SECTION_MAX };
enum class ScalarType : uint32_t { UINT64 = 0, INT64, UINT32, INT32, UINT16, INT16, UINT8, INT8, FLOAT32,
                                   FLOAT16, INVALID_DTYPE };
union ScalarNum {
    uint64_t value_u64;
    int64_t value_i64;
    float value_f32;
};

class OpParamDef {
public:
    explicit OpParamDef(const char* name);
    OpParamDef& ParamType(Option param_type);
    OpParamDef& DataType(std::vector<ge::DataType> types);
    OpParamDef& DataTypeList(std::vector<ge::DataType> types);
    OpParamDef& Format(std::vector<ge::Format> formats);
    OpParamDef& FormatList(std::vector<ge::Format> formats);
    OpParamDef& UnknownShapeFormat(std::vector<ge::Format> formats);
    OpParamDef& ValueDepend(Option value_depend);
    OpParamDef& ValueDepend(Option value_depend, DependScope scope);
    OpParamDef& IgnoreContiguous();
    OpParamDef& AutoContiguous();
    OpParamDef& Scalar();
    OpParamDef& ScalarList();
    OpParamDef& To(const ge::DataType type);
    OpParamDef& To(const char* name);
    OpParamDef& Version(uint32_t version);
    OpParamDef& InitValue(uint64_t value);
    OpParamDef& InitValue(const ScalarType& type, float value);
    OpParamDef& OutputShapeDependOnCompute();
    OpParamDef& Follow(const char* param_name);
    OpParamDef& Follow(const char* param_name, FollowType follow_type);
    OpParamDef& Comment(const char* comment);
};

class OpAttrDef {
public:
    explicit OpAttrDef(const char* name);
    OpAttrDef& AttrType(Option attr_type);
    OpAttrDef& Bool();
    OpAttrDef& Bool(bool value);
    OpAttrDef& Float();
    OpAttrDef& Float(float value);
    OpAttrDef& Int();
    OpAttrDef& Int(int64_t value);
    OpAttrDef& String();
    OpAttrDef& String(const char* value);
    OpAttrDef& ListBool();
    OpAttrDef& ListBool(std::vector<bool> value);
    OpAttrDef& ListFloat();
    OpAttrDef& ListFloat(std::vector<float> value);
    OpAttrDef& ListInt();
    OpAttrDef& ListInt(std::vector<int64_t> value);
    OpAttrDef& ListListInt();
    OpAttrDef& ListListInt(std::vector<std::vector<int64_t>> value);
    OpAttrDef& Version(uint32_t version);
    OpAttrDef& Comment(const char* comment);
};

class OpAICoreConfig {
public:
    OpAICoreConfig();
    explicit OpAICoreConfig(const char* soc);
    OpParamDef& Input(const char* name);
    OpParamDef& Output(const char* name);
    OpAICoreConfig& DynamicCompileStaticFlag(bool flag);
    OpAICoreConfig& DynamicFormatFlag(bool flag);
    OpAICoreConfig& DynamicRankSupportFlag(bool flag);
    OpAICoreConfig& DynamicShapeSupportFlag(bool flag);
    OpAICoreConfig& NeedCheckSupportFlag(bool flag);
    OpAICoreConfig& PrecisionReduceFlag(bool flag);
    OpAICoreConfig& ExtendCfgInfo(const char* key, const char* value);
};

class OpAICoreDef {
public:
    OpAICoreDef& SetTiling(gert::OpImplRegisterV2::TilingKernelFunc func);
    OpAICoreDef& SetCheckSupport(optiling::OP_CHECK_FUNC func);
    OpAICoreDef& SetOpSelectFormat(optiling::OP_CHECK_FUNC func);
    OpAICoreDef& SetOpSupportInfo(optiling::OP_CHECK_FUNC func);
    OpAICoreDef& SetOpSpecInfo(optiling::OP_CHECK_FUNC func);
    OpAICoreDef& SetParamGeneralize(optiling::PARAM_GENERALIZE_FUNC func);
    OpAICoreDef& AddConfig(const char* soc);
    OpAICoreDef& AddConfig(const char* soc, OpAICoreConfig& config);
};

class OpMC2Def {
public:
    OpMC2Def& HcclGroup(const char* value);
    OpMC2Def& HcclGroup(std::vector<const char*> value);
};

class OpDef {
public:
    explicit OpDef(const char* type);
    OpDef(const OpDef& other);
    virtual ~OpDef();
    OpParamDef& Input(const char* name);
    OpParamDef& Output(const char* name);
    OpAttrDef& Attr(const char* name);
    OpDef& SetInferShape(gert::OpImplRegisterV2::InferShapeKernelFunc func);
    OpDef& SetInferShapeRange(gert::OpImplRegisterV2::InferShapeRangeKernelFunc func);
    OpDef& SetInferDataType(gert::OpImplRegisterV2::InferDataTypeKernelFunc func);
    OpAICoreDef& AICore();
    OpMC2Def& MC2();
    OpDef& EnableFallBack();
    OpDef& FormatMatchMode(FormatCheckOption option);
    OpDef& Comment(CommentSection section, const char* comment);
};

using OpDefCreator = OpDef (*)(const char*);
class OpDefFactory {
public:
    static int OpDefRegister(const char* name, OpDefCreator creator);
};
}  // namespace ops

#define OP_ADD(opType, ...) \
    static int g_##opType##_added = ::ops::OpDefFactory::OpDefRegister(#opType, [](const char* name) -> ::ops::OpDef { \
        return opType(name); })
#endif
