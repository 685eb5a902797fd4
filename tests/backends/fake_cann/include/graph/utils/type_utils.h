// Stand-in (from the CANN documentation): ge::TypeUtils conversions between types and their names.
#ifndef EVOKERNEL_STUB_TYPE_UTILS_H
#define EVOKERNEL_STUB_TYPE_UTILS_H
#include <string>
#include "graph/types.h"
namespace ge {
class TypeUtils {
public:
    static std::string DataTypeToSerialString(DataType data_type);
    static DataType SerialStringToDataType(const std::string& str);
    static std::string FormatToSerialString(Format format);
    static Format SerialStringToFormat(const std::string& str);
    static AscendString DataTypeToAscendString(DataType data_type);
    static AscendString FormatToAscendString(Format format);
    static bool GetDataTypeLength(DataType data_type, uint32_t& length);
};
}  // namespace ge
#endif
