// Stand-in (written from the CANN documentation, not copied): the graph engine's runtime types that op_host
// code receives: gert::Shape, StorageShape, Tensor, RuntimeAttrs, TilingData and the kernel contexts of
// tiling, tiling parse, shape inference, shape-range inference and data-type inference.
#ifndef EVOKERNEL_STUB_EXE_GRAPH_CONTEXTS_H
#define EVOKERNEL_STUB_EXE_GRAPH_CONTEXTS_H
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include "graph/types.h"

namespace fe {
class PlatFormInfos;
}

namespace gert {
class Shape {
public:
    static constexpr size_t kMaxDimNum = 25;
    Shape();
    Shape(std::initializer_list<int64_t> dims);
    size_t GetDimNum() const;
    void SetDimNum(size_t dim_num);
    int64_t GetDim(size_t index) const;
    void SetDim(size_t index, int64_t value);
    Shape& AppendDim(int64_t value);
    int64_t GetShapeSize() const;
    bool IsScalar() const;
    void SetScalar();
    const int64_t& operator[](size_t index) const;
    int64_t& operator[](size_t index);
    bool operator==(const Shape& other) const;
    bool operator!=(const Shape& other) const;
};

class StorageShape {
public:
    StorageShape();
    StorageShape(std::initializer_list<int64_t> origin, std::initializer_list<int64_t> storage);
    const Shape& GetOriginShape() const;
    const Shape& GetStorageShape() const;
    Shape& MutableOriginShape();
    Shape& MutableStorageShape();
    bool operator==(const StorageShape& other) const;
    bool operator!=(const StorageShape& other) const;
};

class StorageFormat {
public:
    ge::Format GetOriginFormat() const;
    ge::Format GetStorageFormat() const;
    void SetOriginFormat(ge::Format format);
    void SetStorageFormat(ge::Format format);
};

class CompileTimeTensorDesc {
public:
    ge::DataType GetDataType() const;
    ge::Format GetOriginFormat() const;
    ge::Format GetStorageFormat() const;
    const StorageFormat& GetFormat() const;
    void SetDataType(ge::DataType data_type);
};

class Tensor {
public:
    const Shape& GetOriginShape() const;
    const Shape& GetStorageShape() const;
    const StorageShape& GetShape() const;
    int64_t GetShapeSize() const;
    ge::DataType GetDataType() const;
    ge::Format GetOriginFormat() const;
    ge::Format GetStorageFormat() const;
    const StorageFormat& GetFormat() const;
    size_t GetSize() const;
    const void* GetAddr() const;
    template <typename T> const T* GetData() const;
    template <typename T> T* GetData();
};

class ContinuousVector {
public:
    size_t GetSize() const;
    size_t GetCapacity() const;
    const void* GetData() const;
    void* MutableData();
    ge::graphStatus SetSize(size_t size);
};

template <typename T>
class TypedContinuousVector : public ContinuousVector {
public:
    const T* GetData() const;
    T* MutableData();
};

template <typename T>
class Range {
public:
    const T* GetMin() const;
    const T* GetMax() const;
    T* GetMin();
    T* GetMax();
    void SetMin(T* min);
    void SetMax(T* max);
};

class RuntimeAttrs {
public:
    template <typename T> const T* GetAttrPointer(size_t index) const;
    const int64_t* GetInt(size_t index) const;
    const float* GetFloat(size_t index) const;
    const bool* GetBool(size_t index) const;
    const char* GetStr(size_t index) const;
    const TypedContinuousVector<int64_t>* GetListInt(size_t index) const;
    const TypedContinuousVector<float>* GetListFloat(size_t index) const;
    const TypedContinuousVector<bool>* GetListBool(size_t index) const;
    const ContinuousVector* GetListListInt(size_t index) const;
    size_t GetAttrNum() const;
};

class TilingData {
public:
    static constexpr size_t kDefaultCapacity = 2048;
    void* GetData();
    const void* GetData() const;
    size_t GetCapacity() const;
    size_t GetDataSize() const;
    void SetDataSize(size_t size);
    template <typename T> ge::graphStatus Append(const T& data);
};

class AnchorInstanceInfo {
public:
    size_t GetInstanceStart() const;
    size_t GetInstanceNum() const;
};

class ComputeNodeInfo {
public:
    const char* GetNodeName() const;
    const char* GetNodeType() const;
    size_t GetInputsNum() const;
    size_t GetOutputsNum() const;
    size_t GetIrInputsNum() const;
    const AnchorInstanceInfo* GetInputInstanceInfo(size_t ir_index) const;
    const CompileTimeTensorDesc* GetInputTdInfo(size_t index) const;
    const CompileTimeTensorDesc* GetOutputTdInfo(size_t index) const;
    const RuntimeAttrs* GetAttrs() const;
};

class KernelContext {
public:
    size_t GetInputNum() const;
    size_t GetOutputNum() const;
    template <typename T> const T* GetInputPointer(size_t index) const;
    template <typename T> T GetInputValue(size_t index) const;
    template <typename T> T* GetOutputPointer(size_t index);
};

class ExtendedKernelContext : public KernelContext {
public:
    const char* GetNodeName() const;
    const char* GetNodeType() const;
    const ComputeNodeInfo* GetComputeNodeInfo() const;
    size_t GetComputeNodeInputNum() const;
    size_t GetComputeNodeOutputNum() const;
    const RuntimeAttrs* GetAttrs() const;
    const CompileTimeTensorDesc* GetInputDesc(size_t index) const;
    const CompileTimeTensorDesc* GetOptionalInputDesc(size_t ir_index) const;
    const CompileTimeTensorDesc* GetDynamicInputDesc(size_t ir_index, size_t relative_index) const;
    const CompileTimeTensorDesc* GetOutputDesc(size_t index) const;
    const CompileTimeTensorDesc* GetRequiredInputDesc(size_t ir_index) const;
    const AnchorInstanceInfo* GetIrInputInstanceInfo(size_t ir_index) const;
};

class TilingContext : public ExtendedKernelContext {
public:
    const StorageShape* GetInputShape(size_t index) const;
    const StorageShape* GetOptionalInputShape(size_t ir_index) const;
    const StorageShape* GetDynamicInputShape(size_t ir_index, size_t relative_index) const;
    const StorageShape* GetRequiredInputShape(size_t ir_index) const;
    const StorageShape* GetOutputShape(size_t index) const;
    const Tensor* GetInputTensor(size_t index) const;
    const Tensor* GetOptionalInputTensor(size_t ir_index) const;
    const Tensor* GetDynamicInputTensor(size_t ir_index, size_t relative_index) const;
    const Tensor* GetRequiredInputTensor(size_t ir_index) const;
    template <typename T> const T* GetCompileInfo() const;
    const void* GetCompileInfo() const;
    fe::PlatFormInfos* GetPlatformInfo() const;
    ge::graphStatus SetBlockDim(uint32_t block_dim);
    uint32_t GetBlockDim() const;
    ge::graphStatus SetTilingKey(uint64_t tiling_key);
    uint64_t GetTilingKey() const;
    ge::graphStatus SetNeedAtomic(bool atomic);
    bool NeedAtomic() const;
    ge::graphStatus SetScheduleMode(uint32_t schedule_mode);
    uint32_t GetScheduleMode() const;
    ge::graphStatus SetTilingCond(int32_t tiling_cond);
    int32_t GetTilingCond() const;
    int32_t GetDeterministic() const;
    TilingData* GetRawTilingData();
    template <typename T> T* GetTilingData();
    size_t* GetWorkspaceSizes(size_t workspace_count);
    size_t GetWorkspaceNum() const;
};

class TilingParseContext : public ExtendedKernelContext {
public:
    const char* GetCompiledJson() const;
    template <typename T> T* GetCompiledInfo();
    fe::PlatFormInfos* GetPlatformInfo() const;
};

class InferShapeContext : public ExtendedKernelContext {
public:
    const Shape* GetInputShape(size_t index) const;
    const Shape* GetOptionalInputShape(size_t ir_index) const;
    const Shape* GetDynamicInputShape(size_t ir_index, size_t relative_index) const;
    const Shape* GetRequiredInputShape(size_t ir_index) const;
    const Tensor* GetInputTensor(size_t index) const;
    const Tensor* GetOptionalInputTensor(size_t ir_index) const;
    const Tensor* GetRequiredInputTensor(size_t ir_index) const;
    Shape* GetOutputShape(size_t index);
};

class InferShapeRangeContext : public ExtendedKernelContext {
public:
    const Range<Shape>* GetInputShapeRange(size_t index) const;
    const Range<Shape>* GetOptionalInputShapeRange(size_t ir_index) const;
    const Range<Shape>* GetDynamicInputShapeRange(size_t ir_index, size_t relative_index) const;
    Range<Shape>* GetOutputShapeRange(size_t index);
};

class InferDataTypeContext : public ExtendedKernelContext {
public:
    ge::DataType GetInputDataType(size_t index) const;
    ge::DataType GetOptionalInputDataType(size_t ir_index) const;
    ge::DataType GetDynamicInputDataType(size_t ir_index, size_t relative_index) const;
    ge::DataType GetRequiredInputDataType(size_t ir_index) const;
    ge::DataType GetOutputDataType(size_t index) const;
    ge::graphStatus SetOutputDataType(size_t index, ge::DataType data_type);
};
}  // namespace gert
#endif
