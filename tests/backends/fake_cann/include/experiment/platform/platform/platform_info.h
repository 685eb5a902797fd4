// Stand-in (from the CANN documentation): the platform information object behind PlatformAscendC.
#ifndef EVOKERNEL_STUB_PLATFORM_INFO_H
#define EVOKERNEL_STUB_PLATFORM_INFO_H
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fe {
enum class LocalMemType { L0_A = 0, L0_B = 1, L0_C = 2, L1 = 3, L2 = 4, UB = 5, HBM = 6, RESERVED };

class PlatFormInfos {
public:
    bool GetPlatformRes(const std::string& label, const std::string& key, std::string& value);
    bool GetPlatformResWithLock(const std::string& label, const std::string& key, std::string& value);
    uint32_t GetCoreNum() const;
    void GetLocalMemSize(const LocalMemType& mem_type, uint64_t& size);
    void GetLocalMemBw(const LocalMemType& mem_type, uint64_t& bw_size);
    void SetCoreNumByCoreType(const std::string& core_type);
    std::map<std::string, std::vector<std::string>> GetAICoreIntrinsicDtype();
};

class OptionalInfos {
public:
    std::string GetSocVersion() const;
    std::string GetCoreType() const;
    uint32_t GetAICoreNum() const;
};

class PlatformInfoManager {
public:
    static PlatformInfoManager& Instance();
    uint32_t InitializePlatformInfo();
    uint32_t GetPlatformInfoWithOutSocVersion(PlatFormInfos& platform_info, OptionalInfos& optional_info);
    uint32_t GetPlatformInfos(const std::string soc_version, PlatFormInfos& platform_info,
                              OptionalInfos& optional_info);
};
}  // namespace fe
#endif
