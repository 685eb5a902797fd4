// Stand-in (written from the CANN documentation of PlatformAscendC, not copied): the hardware facts a tiling
// function asks for (core counts, memory sizes, SoC version, the library API workspace).
#ifndef EVOKERNEL_STUB_PLATFORM_ASCENDC_H
#define EVOKERNEL_STUB_PLATFORM_ASCENDC_H
#include <cstdint>

namespace fe {
class PlatFormInfos;
}

namespace platform_ascendc {
enum class CoreMemType { L0_A = 0, L0_B = 1, L0_C = 2, L1 = 3, L2 = 4, UB = 5, HBM = 6, FB = 7, BT = 8, RESERVED };
enum class SocVersion { ASCEND910 = 0, ASCEND910B, ASCEND910_93, ASCEND910_95, ASCEND310P, ASCEND310B,
                        ASCEND610, ASCEND610LITE, ASCEND031, ASCEND035, ASCEND910_55, MC61AM21A, KIRINX90,
                        KIRIN9030, RESERVED_VERSION = 99999 };
enum class ReservedSize { RESERVED_SIZE_8K = 0, RESERVED_SIZE_16K = 1, RESERVED_SIZE_32K = 2 };

class PlatformAscendC {
public:
    PlatformAscendC() = delete;
    explicit PlatformAscendC(fe::PlatFormInfos* platform_info);
    uint32_t GetCoreNum() const;
    uint32_t GetCoreNumAic() const;
    uint32_t GetCoreNumAiv() const;
    uint32_t GetCoreNumVector() const;
    void GetCoreMemSize(const CoreMemType& mem_type, uint64_t& size) const;
    void GetCoreMemBw(const CoreMemType& mem_type, uint64_t& bw_size) const;
    SocVersion GetSocVersion() const;
    uint32_t GetLibApiWorkSpaceSize() const;
    uint32_t GetResGroupBarrierWorkSpaceSize() const;
    uint32_t GetResCubeGroupWorkSpaceSize() const;
    uint32_t CalcTschBlockDim(uint32_t slice_num, uint32_t aic_core_num, uint32_t aiv_core_num) const;
    int64_t ReserveLocalMemory(ReservedSize size);
    fe::PlatFormInfos* GetPlatFormInfo() const;
};

class PlatformAscendCManager {
public:
    static PlatformAscendC* GetInstance();
    static PlatformAscendC* GetInstance(const char* custom_soc_version);
};
}  // namespace platform_ascendc
#endif
