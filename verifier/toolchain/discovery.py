"""Toolchain and device discovery for every backend, in one place.

Where the compilers and SDKs are, which device is present, and — when something is missing — the
one-line reason and its fix. Every function takes what it reads (an environment mapping, the home
folder, the file-system root, the Python that probes torch) as parameters with the live defaults, so
the rules run unchanged against fake directory trees in tests. The rules live in
``verifier.toolchain.cuda`` and ``verifier.toolchain.cann`` (commands and probes in
``verifier.toolchain.probe``); this module gathers them under one name.

The CANN rules follow the project's Ascend plan (public CANN samples, torch_npu sources); none of
them has run against a real NPU workstation yet. Each assumption sits in one constant below.
"""

from __future__ import annotations

from verifier.toolchain.cann import *  # noqa: F403
from verifier.toolchain.cann import (  # noqa: F401
    AscendFindings,
    CannInstall,
    cann_candidates,
    cann_env,
    discover_ascend,
    find_cann,
    npu_arch,
    parse_npu_smi,
    soc_from_name,
    soc_from_smi_name,
)
from verifier.toolchain.cuda import *  # noqa: F403
from verifier.toolchain.cuda import (  # noqa: F401
    CudaFindings,
    choose_cuda_arch,
    discover_cuda,
    find_nvcc,
    nvcc_arches,
    nvcc_version,
    parse_compute_caps,
)
from verifier.toolchain.probe import *  # noqa: F403
from verifier.toolchain.probe import PROBE_MARK, Ran, probe_env, probe_python, run  # noqa: F401
from verifier.toolchain.torch_npu_pairing import *  # noqa: F403
from verifier.toolchain.torch_npu_pairing import (  # noqa: F401
    PROJECT_TORCH,
    TORCH_NPU_PAIRING,
    explain_torch_npu_error,
    torch_npu_installed,
    version_pairing,
)
