// Stand-in (written from the CANN documentation of the tiling data macros, not copied): a tiling data class
// is a flat record of fields with set_<field>/get_<field> accessors (arrays copied in whole; a nested tiling
// struct is a public member), saved into the raw tiling buffer by SaveToBuffer and sized by GetDataSize;
// REGISTER_TILING_DATA_CLASS ties it to an op type with one static registrar. As in CANN, the macros name
// TilingDef and CTilingDataClassFactory unqualified: they are used inside namespace optiling.
#ifndef EVOKERNEL_STUB_TILINGDATA_BASE_H
#define EVOKERNEL_STUB_TILINGDATA_BASE_H
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace optiling {
class TilingDef {
public:
    virtual ~TilingDef() = default;
    void SaveToBuffer(void* pdata, size_t capacity);
    size_t GetDataSize() const;
    const char* GetTilingClassName() const;
};

using TilingDataConstructor = std::shared_ptr<TilingDef> (*)();

class CTilingDataClassFactory {
public:
    static CTilingDataClassFactory& GetInstance();
    void RegisterTilingData(const char* op_type, TilingDataConstructor constructor);
    std::shared_ptr<TilingDef> CreateTilingDataInstance(const char* op_type);
};
}  // namespace optiling

#define BEGIN_TILING_DATA_DEF(class_name) \
    class class_name : public TilingDef { \
    public:
#define TILING_DATA_FIELD_DEF(data_type, field_name) \
public: \
    void set_##field_name(data_type field_name) { field_name##_ = field_name; } \
    data_type get_##field_name() { return field_name##_; } \
private: \
    data_type field_name##_ = 0;
#define TILING_DATA_FIELD_DEF_ARR(arr_type, arr_size, field_name) \
public: \
    void set_##field_name(arr_type* field_name) { std::memcpy(field_name##_, field_name, sizeof(field_name##_)); } \
    arr_type* get_##field_name() { return field_name##_; } \
private: \
    arr_type field_name##_[arr_size] = {};
#define TILING_DATA_FIELD_DEF_STRUCT(struct_type, field_name) \
public: \
    struct_type field_name;
#define END_TILING_DATA_DEF \
    };
#define REGISTER_TILING_DATA_CLASS(op_type, class_name) \
    class op_type##class_name##Helper { \
    public: \
        op_type##class_name##Helper() { \
            CTilingDataClassFactory::GetInstance().RegisterTilingData(#op_type, Create); \
        } \
        static std::shared_ptr<TilingDef> Create() { return std::make_shared<class_name>(); } \
    }; \
    static op_type##class_name##Helper g_tilingdata_##op_type##class_name##helper;
#endif
