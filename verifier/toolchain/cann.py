"""Ascend CANN toolkit and NPU discovery: the install, its CMake modules and compilers, the SoC and its
architecture, the torch_npu pairing (see verifier.toolchain.discovery). None of these rules has run against a
real NPU workstation yet; each assumption sits in one constant."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifier.toolchain.probe import PROBE_MARK, _executable, _first_line, probe_env, probe_python, run
from verifier.toolchain.torch_npu_pairing import (
    _distribution_version,
    explain_torch_npu_error,
    torch_npu_installed,
    version_pairing,
)

# ----------------------------------------------------------------------------- Ascend (CANN)

# Where the Ascend C kernel-launch CMake module lives, first match wins. asc-devkit installs it under
# ``<arch>-linux/tikcpp/`` and the official samples' set_sample_env.sh looks there, then ``tikcpp/``;
# ``compiler/`` and ``tools/`` are the CANN 7/8 toolkit links to it; the last is an old samples layout.
ASCENDC_CMAKE_DIRS = (
    "{arch}-linux/tikcpp/ascendc_kernel_cmake",
    "tikcpp/ascendc_kernel_cmake",
    "compiler/tikcpp/ascendc_kernel_cmake",
    "tools/tikcpp/ascendc_kernel_cmake",
    "ascendc_devkit/tikcpp/samples/cmake",
)
# CANN 9's ASC language package (find_package(ASC)); searched under these, relative to the root. CANN 9's samples
# and op repositories give find_package(ASC ... HINTS ${ASCEND_CANN_PACKAGE_PATH}/compiler/tikcpp/ascendc_kernel_cmake)
# (or <arch>-linux/tikcpp/ascendc_kernel_cmake); others the arch folder's lib64/cmake.
ASC_PACKAGE_BASES = ("compiler/tikcpp/ascendc_kernel_cmake", "{arch}-linux/tikcpp/ascendc_kernel_cmake",
                     "tools/tikcpp/ascendc_kernel_cmake", "{arch}-linux/lib64/cmake", "lib64/cmake",
                     "{arch}-linux/cmake", "cmake")
ASC_CONFIG_NAMES = ("ASCConfig.cmake", "asc-config.cmake")
BISHENG_PATHS = ("{arch}-linux/ccec_compiler/bin/bisheng", "compiler/ccec_compiler/bin/bisheng",
                 "tools/ccec_compiler/bin/bisheng", "{arch}-linux/bin/bisheng", "bin/bisheng")
SET_ENV_PATHS = ("set_env.sh", "../set_env.sh", "bin/setenv.bash")
# msopgen, the custom-op project generator (the custom-op form); set_env.sh puts the first on PATH.
MSOPGEN_PATHS = ("python/site-packages/bin/msopgen", "tools/msopgen/bin/msopgen", "bin/msopgen",
                 "{arch}-linux/bin/msopgen")
# SoC version prefix -> bisheng --npu-arch (ASC flow).
NPU_ARCH = (("Ascend310P", "dav-2002"), ("Ascend910B", "dav-2201"), ("Ascend910_93", "dav-2201"),
            ("Ascend950", "dav-3510"))
# Variables a sourced set_env.sh may contribute to the worker and compiler environment.
_CANN_ENV_KEYS = re.compile(r"^(PATH|LD_LIBRARY_PATH|PYTHONPATH|ASCEND_[A-Z_]+|TOOLCHAIN_HOME)$")


@dataclass
class CannInstall:
    """A CANN toolkit found on this machine and what its layout offers."""

    root: Path
    found_by: str                      # the search rule that found it, e.g. "$ASCEND_HOME_PATH"
    arch: str                          # host architecture folder prefix: "aarch64" or "x86_64"
    version: str = "unknown"
    flow: str | None = None            # "ascendc_library" (CANN <= 8) | "asc" (CANN 9) | None
    cmake_dir: Path | None = None      # ascendc_kernel_cmake folder, or the ASC package folder
    bisheng: Path | None = None
    set_env: Path | None = None
    msopgen: Path | None = None        # the custom-op form's project generator

    @property
    def problem(self) -> str:
        """Why this install cannot build kernels ("" when it can)."""
        if self.flow is None:
            looked = ", ".join(rel.format(arch=self.arch) for rel in ASCENDC_CMAKE_DIRS)
            return (f"CANN at {self.root} has no Ascend C CMake module ({looked}) nor the CANN 9 ASC package: "
                    "install the CANN toolkit package, not only the runtime")
        if self.bisheng is None:
            return f"CANN at {self.root} has no bisheng compiler: install the CANN toolkit package"
        return ""


def cann_candidates(env: Mapping[str, str], home: str | Path, system_root: str | Path = "/") -> list[tuple[str, Path]]:
    """The CANN roots to try, in order: ``$ASCEND_INSTALL_PATH``, ``$ASCEND_HOME_PATH`` (each as the
    toolkit root itself or an install folder holding one), ``~/Ascend``, then ``/usr/local/Ascend``;
    per install folder the classic ``ascend-toolkit/latest`` before CANN 9's ``cann``."""
    out: list[tuple[str, Path]] = []
    for var in ("ASCEND_INSTALL_PATH", "ASCEND_HOME_PATH"):
        value = env.get(var)
        if value:
            base = Path(value)
            out += [(f"${var}", base), (f"${var}/ascend-toolkit/latest", base / "ascend-toolkit/latest"),
                    (f"${var}/cann", base / "cann"), (f"${var}/latest", base / "latest")]
    for label, install in (("~/Ascend", Path(home) / "Ascend"),
                           ("/usr/local/Ascend", Path(system_root) / "usr/local/Ascend")):
        out += [(f"{label}/ascend-toolkit/latest", install / "ascend-toolkit/latest"),
                (f"{label}/cann", install / "cann")]
    return out


def _looks_like_cann(path: Path) -> bool:
    if not path.is_dir():
        return False
    markers = ("version.cfg", "set_env.sh", "bin/setenv.bash", "compiler", "tools", "lib64", "include")
    return any((path / m).exists() for m in markers) or any(path.glob("*-linux"))


def _host_arch(root: Path, machine: str | None = None) -> str:
    machine = machine or platform.machine()
    if (root / f"{machine}-linux").is_dir():
        return machine
    for found in sorted(root.glob("*-linux")):
        return found.name[: -len("-linux")]
    return machine


def cann_version(root: Path, arch: str) -> str:
    """The toolkit version: ``version.cfg``, else ``<arch>-linux/ascend_toolkit_install.info``, else a
    version-looking part of the resolved path (``8.0.RC3``, ``cann-9.0.0``)."""
    try:
        text = (root / "version.cfg").read_text(errors="replace")
        m = re.search(r"toolkit_running_version=\[[^\]:]*:([^\]]+)\]", text) or \
            re.search(r"^\s*version\s*=\s*(\S+)", text, re.M)
        if m:
            return m.group(1).strip()
    except OSError:
        pass
    for info in (root / f"{arch}-linux/ascend_toolkit_install.info", root / "ascend_toolkit_install.info"):
        try:
            m = re.search(r"^\s*version\s*=\s*(\S+)", info.read_text(errors="replace"), re.M)
        except OSError:
            continue
        if m:
            return m.group(1).strip()
    for part in reversed(root.resolve().parts):
        m = re.search(r"(\d+\.\d+(?:\.[A-Za-z0-9]+)*)", part)
        if m:
            return m.group(1)
    return "unknown"


def ascendc_cmake_dir(root: Path, arch: str) -> Path | None:
    """The first ``ASCENDC_CMAKE_DIRS`` entry holding ``ascendc.cmake``."""
    for rel in ASCENDC_CMAKE_DIRS:
        folder = root / rel.format(arch=arch)
        if (folder / "ascendc.cmake").is_file():
            return folder
    return None


def asc_package_dir(root: Path, arch: str) -> Path | None:
    """The folder to give ``find_package(ASC ... HINTS)``: one holding ``ASCConfig.cmake`` directly or
    in an ``ASC*`` subfolder."""
    for rel in ASC_PACKAGE_BASES:
        base = root / rel.format(arch=arch)
        if not base.is_dir():
            continue
        for name in ASC_CONFIG_NAMES:
            if (base / name).is_file() or any(base.glob(f"[Aa][Ss][Cc]*/{name}")):
                return base
    return None


def inspect_cann(root: Path, found_by: str, machine: str | None = None) -> CannInstall:
    arch = _host_arch(root, machine)
    install = CannInstall(root=root, found_by=found_by, arch=arch, version=cann_version(root, arch))
    classic = ascendc_cmake_dir(root, arch)
    asc = asc_package_dir(root, arch)
    # An ascendc_kernel_cmake folder that holds the ASC package too is CANN 9's, whose ascendc.cmake builds with
    # the ASC language (find_package(ASC) first): the ASC flow. Elsewhere the classic module wins.
    if classic is not None and classic != asc:
        install.flow, install.cmake_dir = "ascendc_library", classic
    elif asc is not None:
        install.flow, install.cmake_dir = "asc", asc
    for rel in BISHENG_PATHS:
        path = root / rel.format(arch=arch)
        if path.is_file():
            install.bisheng = path
            break
    for rel in SET_ENV_PATHS:
        path = root / rel
        if path.is_file():
            install.set_env = path.resolve()
            break
    for rel in MSOPGEN_PATHS:
        path = root / rel.format(arch=arch)
        if path.is_file():
            install.msopgen = path
            break
    return install


def find_cann(env: Mapping[str, str] | None = None, home: str | Path | None = None, system_root: str | Path = "/",
              machine: str | None = None) -> tuple[CannInstall | None, list[str]]:
    """The first CANN root in ``cann_candidates`` order, and the rules tried (for the message)."""
    env = os.environ if env is None else env
    home = Path(home) if home is not None else Path(os.path.expanduser("~"))
    tried: list[str] = []
    seen: set[str] = set()
    for label, path in cann_candidates(env, home, system_root):
        if str(path) in seen:
            continue
        seen.add(str(path))
        tried.append(label)
        if _looks_like_cann(path):
            return inspect_cann(path, label, machine), tried
    return None, tried


def cann_env(install: CannInstall, env: Mapping[str, str] | None = None, timeout: float = 30.0) -> dict[str, str]:
    """The variables CANN's ``set_env.sh`` would set, for workers and compilers. Nothing when the user
    already sourced it; else the script is sourced in ``bash`` and its effect captured; else a minimal
    fallback (home path and library folders)."""
    env = dict(os.environ if env is None else env)
    if env.get("ASCEND_HOME_PATH") and env.get("ASCEND_OPP_PATH"):
        return {}
    if install.set_env is not None and shutil.which("bash"):
        ran = run(["bash", "-c", 'source "$1" >/dev/null 2>&1; env -0', "evokernel-cann-env", str(install.set_env)],
                  env=env, timeout=timeout)
        if ran.code == 0:
            after = dict(item.split("=", 1) for item in ran.out.split("\0") if "=" in item)
            # CANN's own variables always (the worker environment stands on its own), the search paths when changed
            return {k: v for k, v in after.items()
                    if _CANN_ENV_KEYS.match(k) and (k.startswith("ASCEND_") or env.get(k) != v)}
    root = install.root
    libs = [str(p) for p in (root / "lib64", root / f"{install.arch}-linux/lib64", root / "runtime/lib64",
                             Path("/usr/local/Ascend/driver/lib64/driver"),
                             Path("/usr/local/Ascend/driver/lib64/common"))
            if p.is_dir()]
    out = {"ASCEND_HOME_PATH": str(root), "ASCEND_TOOLKIT_HOME": str(root), "ASCEND_OPP_PATH": str(root / "opp")}
    if libs:
        inherited = [env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH") else []
        out["LD_LIBRARY_PATH"] = os.pathsep.join([*libs, *inherited])
    return out


def parse_npu_smi(text: str) -> list[str]:
    """The Name column of ``npu-smi info`` per NPU (``["910B3", "910B3"]``); chip and process rows skipped."""
    names = []
    for line in text.splitlines():
        m = re.match(r"^\|\s*(\d+)\s+([A-Za-z0-9][A-Za-z0-9_\-]*)\s*\|\s*([A-Za-z]+)\s*\|", line)
        if m and not m.group(2).isdigit():
            names.append(m.group(2))
    return names


def soc_from_name(name: str) -> str:
    """A device name as CMake's ``SOC_VERSION`` spells it: "910B2" -> "Ascend910B2", "910_9392" ->
    "Ascend910_9392"."""
    name = name.strip()
    return name if name.lower().startswith("ascend") else f"Ascend{name}"


# npu-smi Names that do not say the exact SoC: an A3 (Ascend910_93xx) or an original 910 (910A/B...).
# The SoC must then come from aclrtGetSocName() or EVOKERNEL_ASCEND_SOC.
_AMBIGUOUS_SMI_NAMES = re.compile(r"^(Ascend)?910$", re.I)


def soc_from_smi_name(name: str) -> tuple[str | None, str]:
    """The SoC an ``npu-smi info`` Name stands for, or (None, why not). The Name column is a fallback:
    the SoC the kernels must be built for is what ``aclrtGetSocName()`` returns."""
    if _AMBIGUOUS_SMI_NAMES.match(name.strip()):
        return None, (f"npu-smi names the NPU {name!r}, which does not say the SoC (an A3 Ascend910_93xx or an "
                      "original Ascend910): set EVOKERNEL_ASCEND_SOC to the exact SoC (e.g. Ascend910_9392)")
    return soc_from_name(name), ""


def soc_family(soc: str) -> str:
    """The SoC family an OpDef's ``AddConfig`` names for SoC version ``soc`` (msopgen's SOC_VERSION_TYPE):
    ``Ascend910B2`` -> ``ascend910b``, ``Ascend910_9382`` -> ``ascend910_93`` (A3), ``Ascend310P3`` ->
    ``ascend310p``, ``Ascend910ProB`` -> ``ascend910``, ``Ascend950PR`` -> ``ascend950``; else the version itself."""
    low = soc.strip().lower()
    for pattern, family in ((r"ascend910_93\d*", "ascend910_93"), (r"ascend910b\d.*", "ascend910b"),
                            (r"ascend910(a|proa|b|prob|premiuma)?", "ascend910"), (r"ascend950(dt|pr)", "ascend950"),
                            (r"ascend310p\d.*", "ascend310p"), (r"ascend310b\d", "ascend310b")):
        if re.fullmatch(pattern, low):
            return family
    return low


def npu_arch(soc: str) -> str | None:
    """bisheng ``--npu-arch`` for a SoC version (CANN 9's ASC flow)."""
    for prefix, arch in NPU_ARCH:
        if soc.startswith(prefix):
            return arch
    return None


def soc_supported(install: CannInstall, soc: str) -> bool | None:
    """Whether the toolkit ships a platform config for ``soc``; None when it has no such folder."""
    for rel in (f"{install.arch}-linux/data/platform_config", "compiler/data/platform_config", "data/platform_config"):
        folder = install.root / rel
        if folder.is_dir():
            return (folder / f"{soc}.ini").is_file()
    return None


def opp_kernel_problem(install: CannInstall, env: Mapping[str, str], soc: str) -> str:
    """"" when CANN's binary operator package for ``soc``'s family is installed
    (``<opp>/built-in/op_impl/ai_core/tbe/kernel/<family>``, ``<opp>`` being ``ASCEND_OPP_PATH`` or ``<root>/opp``);
    else the problem with its fix. Without it the toolkit builds kernels but no built-in NPU op runs: torch's NPU ops
    and every aclnn call find no kernel (ACLNN_ERR_INNER_FIND_KERNEL_ERROR 561003, ...OPP_KERNEL_PKG_NOT_FOUND
    561112)."""
    opp = Path(env.get("ASCEND_OPP_PATH") or install.root / "opp")
    family = soc_family(soc)
    kernels = opp / "built-in/op_impl/ai_core/tbe/kernel" / family
    try:
        if kernels.is_dir() and any(kernels.iterdir()):
            return ""
    except OSError:
        pass
    return (f"CANN's binary operator package for {family} is not installed ({kernels} is missing or empty): no "
            f"built-in NPU op would run (torch's NPU ops, every aclnn call: 561003 / 561112); install CANN "
            f"{install.version}'s operator package for this SoC (Ascend-cann-kernels-*)")


def query_npu_smi(env: Mapping[str, str], system_root: str | Path = "/") -> tuple[list[str], str]:
    """NPU names from ``npu-smi info``, or ([], why not)."""
    exe = shutil.which("npu-smi", path=env.get("PATH", "")) or next(
        (str(p) for p in (Path(system_root) / "usr/local/sbin/npu-smi", Path(system_root) / "usr/local/bin/npu-smi")
         if _executable(p)), None)
    if not exe:
        return [], "npu-smi not found (no Ascend driver?)"
    ran = run([exe, "info"], env=env, timeout=30)
    if ran.code != 0:
        return [], f"npu-smi info failed: {_first_line(ran.out)}"
    names = parse_npu_smi(ran.out)
    return names, "" if names else "npu-smi info lists no NPU"


PROBE_TORCH_NPU = f"""
import json
out = {{}}
try:
    import torch
    out["torch"] = torch.__version__
except Exception as exc:
    text = str(exc).strip().splitlines()
    out["error"] = "import torch failed: " + type(exc).__name__ + ": " + (text[0] if text else "")
else:
    try:
        from importlib import metadata
        out["torch_npu_dist"] = metadata.version("torch_npu")   # even when the import fails below
    except Exception:
        pass
    try:
        import torch_npu
        out["torch_npu"] = getattr(torch_npu, "__version__", "?")
    except Exception as exc:
        text = str(exc).strip().splitlines()
        out["error"] = "import torch_npu failed: " + type(exc).__name__ + ": " + (text[0] if text else "")
    else:
        try:
            out["count"] = torch.npu.device_count()
            if out["count"]:
                out["name"] = torch.npu.get_device_name(0)
        except Exception as exc:
            text = str(exc).strip().splitlines()
            out["device_error"] = type(exc).__name__ + ": " + (text[0] if text else "")
print({PROBE_MARK!r} + json.dumps(out))
"""


# The SoC as the runtime names it (the official get_soc_version sample's way): aclrtGetSocName() from
# libascendcl, in a subprocess with the CANN environment; nothing else of this process touches ACL.
PROBE_ACL_SOC = f"""
import ctypes, json, sys
out = {{}}
try:
    acl = ctypes.CDLL(sys.argv[1])
    acl.aclrtGetSocName.restype = ctypes.c_char_p
    acl.aclrtGetSocName.argtypes = []
    name = acl.aclrtGetSocName()
    if not name:
        acl.aclInit.argtypes = [ctypes.c_char_p]
        acl.aclInit(None)
        name = acl.aclrtGetSocName()
        acl.aclFinalize()
    if name:
        out["soc"] = name.decode(errors="replace")
    else:
        out["error"] = "aclrtGetSocName() returned nothing"
except Exception as exc:
    text = str(exc).strip()
    out["error"] = type(exc).__name__ + ": " + text.splitlines()[0] if text else type(exc).__name__
print({PROBE_MARK!r} + json.dumps(out))
"""


def ascendcl_library(install: CannInstall) -> Path | None:
    """``libascendcl.so`` of a CANN install (lib64, the arch folder's lib64, runtime/lib64)."""
    for folder in (install.root / "lib64", install.root / f"{install.arch}-linux/lib64",
                   install.root / "runtime/lib64"):
        if (folder / "libascendcl.so").is_file():
            return folder / "libascendcl.so"
    return None


def probe_acl_soc(install: CannInstall, env: Mapping[str, str], timeout: float = 60.0) -> tuple[str | None, str]:
    """(SoC from ``aclrtGetSocName()``, or None and why not)."""
    library = ascendcl_library(install)
    if library is None:
        return None, f"no libascendcl.so under {install.root}"
    ran = run([sys.executable, "-c", PROBE_ACL_SOC, str(library)], env=env, timeout=timeout)
    for line in reversed(ran.out.splitlines()):
        if line.startswith(PROBE_MARK):
            try:
                found = json.loads(line[len(PROBE_MARK):])
            except ValueError:
                break
            return (found.get("soc") or None), found.get("error", "")
    return None, _first_line(ran.out) or f"the aclrtGetSocName() probe exited with {ran.code}"


# The Python packages CANN's Python code (msopgen's project build, the kernel compile scripts, tbe) needs, as the
# CANN installation guide lists them (instg "install dependencies": numpy, decorator, sympy, cffi, protobuf, attrs,
# scipy, psutil; CANN 8.5/9: numpy < 2 on Python < 3.13): (pip name, module imported).
CANN_PYTHON_REQUIREMENTS = (("numpy", "numpy"), ("decorator", "decorator"), ("sympy", "sympy"), ("cffi", "cffi"),
                            ("protobuf", "google.protobuf"), ("attrs", "attr"), ("scipy", "scipy"),
                            ("psutil", "psutil"))
# Names a Python that CANN's build steps should use instead of the first python3 on PATH.
TOOLKIT_PYTHON_VARIABLE = "EVOKERNEL_ASCEND_PYTHON"

PROBE_CANN_PYTHON = f"""
import importlib, json, site, sys
out = {{"python": "%d.%d" % sys.version_info[:2], "modules": {{}},
       "prefix": [sys.prefix, sys.base_prefix], "user_base": site.getuserbase(),
       "user_site": site.getusersitepackages()}}
for pip_name, module in {CANN_PYTHON_REQUIREMENTS!r}:
    try:
        imported = importlib.import_module(module)
        out["modules"][pip_name] = str(getattr(imported, "__version__", "") or "?")
    except Exception:
        out["modules"][pip_name] = None
print({PROBE_MARK!r} + json.dumps(out))
"""


def _in_virtualenv(python: Path) -> bool:
    return (python.parent.parent / "pyvenv.cfg").is_file()


def toolkit_python(env: Mapping[str, str]) -> tuple[str | None, str]:
    """The Python CANN's build steps should run: ``$EVOKERNEL_ASCEND_PYTHON``, else the first ``python3`` on PATH
    outside a virtual environment (msopgen and build.sh run the first ``python3`` on PATH; this project's venv
    has numpy 2 and not CANN's requirements). (path or None, how it was found or why none)."""
    named = env.get(TOOLKIT_PYTHON_VARIABLE)
    if named:
        if _executable(Path(named)):
            return named, f"${TOOLKIT_PYTHON_VARIABLE}"
        return None, f"${TOOLKIT_PYTHON_VARIABLE}={named} is not an executable Python"
    for folder in env.get("PATH", "").split(os.pathsep):
        candidate = Path(folder or ".") / "python3"
        if _executable(candidate) and not _in_virtualenv(candidate):
            return str(candidate), "the first python3 on PATH outside a virtual environment"
    return None, f"no python3 on PATH outside a virtual environment: set {TOOLKIT_PYTHON_VARIABLE}"


@dataclass(frozen=True)
class ToolkitPython:
    """Where the toolkit's Python finds its packages, so a build with HOME set to its own folder and a view of the
    system's files still finds them: its prefixes and its user site (``pip install --user``: under the user's home,
    which the build sandbox hides, at a base found from HOME, which the build replaces)."""

    prefixes: tuple[str, ...] = ()
    user_base: str = ""
    user_site: str = ""

    def readable(self) -> list[str]:
        return [p for p in (*self.prefixes, self.user_site) if p and os.path.isdir(p)]

    def env(self) -> dict[str, str]:
        """PYTHONUSERBASE: the user site where the user's HOME put it, whatever HOME the build has."""
        return {"PYTHONUSERBASE": self.user_base} if self.user_base and os.path.isdir(self.user_site) else {}


def cann_python(python: str, env: Mapping[str, str]) -> tuple[str, ToolkitPython]:
    """What ``python`` lacks of CANN's Python requirements, in one line with its fix ("" when nothing), and where
    it finds its packages."""
    found = probe_python(PROBE_CANN_PYTHON, python=python, env=env, timeout=60)
    if found.get("error"):
        return f"the toolkit Python {python} could not be asked for CANN's requirements: {found['error']}", \
            ToolkitPython()
    paths = ToolkitPython(tuple(dict.fromkeys(str(p) for p in found.get("prefix", []) if p)),
                          str(found.get("user_base") or ""), str(found.get("user_site") or ""))
    return cann_python_problem(python, found), paths


def cann_python_problem(python: str, found: dict[str, Any]) -> str:
    """What ``python`` lacks of CANN's Python requirements (its probe: ``found``), in one line with its fix; ""
    when nothing."""
    modules = found.get("modules", {})
    missing = [name for name, version in modules.items() if version is None]
    wrong = []
    numpy = modules.get("numpy")
    major, minor = (int(x) for x in str(found.get("python", "0.0")).split("."))
    if numpy and (major, minor) < (3, 13) and numpy.split(".")[0].isdigit() and int(numpy.split(".")[0]) >= 2:
        wrong.append(f"numpy {numpy} (CANN needs numpy<2 on Python < 3.13)")
    if not missing and not wrong:
        return ""
    said = "; ".join([*(["lacks " + ", ".join(missing)] if missing else []), *(["has " + w for w in wrong])])
    install = " ".join(["'numpy<2'" if name == "numpy" else name for name in missing]
                       + (["'numpy<2'"] if wrong and "numpy" not in missing else []))
    return (f"the toolkit Python {python} (Python {found.get('python')}) {said}: CANN's build steps (msopgen, "
            f"build.sh, the kernel compile) need them (CANN installation guide): {python} -m pip install {install}, "
            f"or set {TOOLKIT_PYTHON_VARIABLE} to a Python that has them")


@dataclass
class AscendFindings:
    """What Ascend discovery found; ``problems`` are one-line reasons with their fix."""

    install: CannInstall | None = None
    tried: list[str] = field(default_factory=list)
    cmake: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    torch: dict[str, Any] = field(default_factory=dict)
    smi_names: list[str] = field(default_factory=list)
    smi_note: str = ""
    soc: str | None = None
    soc_source: str = ""
    acl_note: str = ""                 # why aclrtGetSocName() gave no SoC, when it did not
    python: str | None = None          # the toolkit's Python, for CANN's build steps
    python_note: str = ""              # how it was found, or why none was
    python_problem: str = ""           # what it lacks of CANN's Python requirements (the custom-op form's build)
    python_paths: ToolkitPython = field(default_factory=ToolkitPython)   # where it finds its packages
    versions: dict[str, str] = field(default_factory=dict)   # torch, torch_npu, cann as installed
    device: str = ""
    toolchain_problems: list[str] = field(default_factory=list)
    device_problems: list[str] = field(default_factory=list)


def discover_ascend(env: Mapping[str, str] | None = None, *, home: str | Path | None = None,
                    system_root: str | Path = "/", machine: str | None = None, python: str | None = None,
                    soc: str | None = None, probe_torch: bool = True) -> AscendFindings:
    """CANN root and layout, cmake, torch_npu (probed in a subprocess with device autoload off), the
    NPU and its SoC. ``soc`` (or ``$EVOKERNEL_ASCEND_SOC``) names the SoC when there is no device to
    ask, and must then match the device when there is one."""
    env = dict(os.environ if env is None else env)
    f = AscendFindings()
    _find_toolkit(f, env, home, system_root, machine)
    explicit = soc or env.get("EVOKERNEL_ASCEND_SOC") or None
    detected = _probe_torch_npu(f, env, python) if probe_torch else None
    if detected is None:
        detected = _ask_the_device(f, env, system_root, explicit)
    if explicit and detected and explicit != detected:
        f.device_problems.append(f"SoC mismatch: EVOKERNEL_ASCEND_SOC is {explicit} but the device is {detected} "
                                 f"({f.soc_source}); unset it or build for {detected}")
    f.soc = explicit or detected
    if explicit and not detected:
        f.soc_source = "EVOKERNEL_ASCEND_SOC" if not soc else "configured"
    if f.soc:
        f.device = f.soc
        _check_soc(f, env, f.soc, bool(detected))
    return f


def _find_toolkit(f: AscendFindings, env: dict[str, str], home: str | Path | None, system_root: str | Path,
                  machine: str | None) -> None:
    """The CANN install, its environment and its toolkit Python (for the custom-op build), and cmake."""
    f.install, f.tried = find_cann(env, home, system_root, machine)
    if f.install is None:
        f.toolchain_problems.append(
            f"CANN not found (tried {', '.join(f.tried)}): install the CANN toolkit and source its set_env.sh, "
            "or set ASCEND_HOME_PATH")
    else:
        if f.install.problem:
            f.toolchain_problems.append(f.install.problem)
        f.env = cann_env(f.install, env)
        f.python, f.python_note = toolkit_python({**env, **f.env})
        if f.python:
            f.python_problem, f.python_paths = cann_python(f.python, {**env, **f.env})
        else:
            f.python_problem = f"no toolkit Python for CANN's build steps: {f.python_note}"
    f.cmake = shutil.which("cmake", path=env.get("PATH", ""))
    if f.cmake is None:
        f.toolchain_problems.append("cmake not found: install CMake 3.16 or newer (Debian/Ubuntu: apt install cmake)")


def _probe_torch_npu(f: AscendFindings, env: dict[str, str], python: str | None) -> str | None:
    """torch_npu probed in a subprocess: its versions against torch's and CANN's, the device it sees; the SoC
    its device name says (the runtime's aclrtGetSocName()), or None."""
    if not torch_npu_installed(python):
        f.torch = {"error": "No module named 'torch_npu'", "torch": _distribution_version("torch", python)}
    else:
        f.torch = probe_python(PROBE_TORCH_NPU, python=python, env=probe_env(env, f.env))
    # when the import failed, the installed version still says whether it matches torch
    f.versions = {"torch": f.torch.get("torch", ""),
                  "torch_npu": f.torch.get("torch_npu") or f.torch.get("torch_npu_dist") or "",
                  "cann": f.install.version if f.install else ""}
    pairing = version_pairing(f.versions["torch"], f.versions["torch_npu"], f.versions["cann"])
    detected: str | None = None
    if f.torch.get("error"):
        f.device_problems.append(explain_torch_npu_error(f.torch["error"], f.torch.get("torch", "")))
    elif f.torch.get("device_error"):
        f.device_problems.append(f"no NPU device: {f.torch['device_error']}")
    elif not f.torch.get("count"):
        f.device_problems.append("no NPU device: torch.npu.device_count() is 0 (driver not loaded, or "
                                 "ASCEND_RT_VISIBLE_DEVICES hides it)")
    elif f.torch.get("name"):
        # torch_npu's device name is the runtime's aclrtGetSocName()
        detected, f.soc_source = soc_from_name(f.torch["name"]), "torch.npu.get_device_name(0)"
    f.device_problems += [p for p in pairing if p not in f.device_problems]
    return detected


def _ask_the_device(f: AscendFindings, env: dict[str, str], system_root: str | Path, explicit: str | None
                    ) -> str | None:
    """The SoC from ACL (aclrtGetSocName()), else from npu-smi; None, with why, when neither names one."""
    detected: str | None = None
    if f.install is not None:
        detected, f.acl_note = probe_acl_soc(f.install, {**env, **f.env})
        if detected:
            f.soc_source = "aclrtGetSocName()"
            return detected
    f.smi_names, f.smi_note = query_npu_smi(env, system_root)
    if f.smi_names:
        detected, why = soc_from_smi_name(f.smi_names[0])
        if detected:
            f.soc_source = "npu-smi info"
        elif not explicit:
            f.device_problems.append(why)
    else:
        f.device_problems.append(f"no NPU device: {f.smi_note}")
    return detected


def _check_soc(f: AscendFindings, env: dict[str, str], soc: str, on_device: bool) -> None:
    """What the SoC needs of the install: its operator package (with a device to run on), a platform config,
    and for the ASC flow an --npu-arch."""
    if f.install is None:
        return
    if on_device:   # a device to run on: its operator package must be there
        opp_problem = opp_kernel_problem(f.install, {**env, **f.env}, soc)
        if opp_problem:
            f.device_problems.append(opp_problem)
    supported = soc_supported(f.install, soc)
    if supported is False:
        f.toolchain_problems.append(f"SoC mismatch: CANN {f.install.version} at {f.install.root} has no "
                                    f"platform config for {soc}; install a CANN release that supports it")
    if f.install.flow == "asc" and npu_arch(soc) is None:
        f.toolchain_problems.append(f"no --npu-arch known for SoC {soc} (the ASC flow needs one)")
