"""The Ascend custom-op project form: what the public NPU suites ask models for, beside the kernel-launch form
(``verifier.backends.ascend``).

A candidate of this form is a CANN custom-operator project's own pieces, in their folders:

* ``op_host/``: the tiling data (a header with ``BEGIN_TILING_DATA_DEF`` ... ``REGISTER_TILING_DATA_CLASS``)
  and the host source with ``TilingFunc`` and the op definition (``class X : public OpDef`` ... ``OP_ADD(X)``),
  with any helpers they include;
* ``op_kernel/``: the device kernel (``extern "C" __global__ __aicore__``) and its headers (sub-folders allowed);
* the op description JSON (msopgen's input), optional: when absent it is derived from the op definition;
* the binding: one top-level ``.cpp`` whose ``extern "C"`` launchers call the generated ``aclnn<Op>`` (the
  runtime contract of every backend: ``model.py`` calls them through ``verifier.runtime``);
* ``CMakeLists.txt`` (the cann-ops per-op file some suites ship), optional: its ``add_ops_compile_options``
  are carried into the project's kernel build.

The build follows CANN's custom-op flow in one generated script: ``msopgen gen`` makes the project from the
JSON, the pieces are copied in, ``build.sh`` builds it (with ``ASCEND_CUSTOM_OPP_PATH`` unset), the
``custom_opp_*.run`` package installs into a private vendor folder inside the build (``vendor/``), and the
binding is linked against that vendor's ``op_api`` into the library the runtime loads; the call needs
``ASCEND_CUSTOM_OPP_PATH`` pointed at the vendor (``call_env``). Nothing here has run with CANN yet: every
command line is one constant or function below.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath

from verifier.toolchain.cann import CannInstall
from verifier.toolchain.csource import scan, splice

FORM_KERNEL_LAUNCH = "kernel-launch"
FORM_CUSTOM_OP = "custom-op"
HOST_DIR = "op_host"
KERNEL_DIR = "op_kernel"
PROJECT_DIRS = (HOST_DIR, KERNEL_DIR)
PROJECT_SOURCES = (".cpp", ".cc")
PROJECT_HEADERS = (".h", ".hpp")
PROJECT_EXTRAS = (".json", "CMakeLists.txt")
MAX_PROJECT_FILES = 64        # real answers hold up to 32 files (NPUKernelBench's FlashAttentionScoreWithLargeHeadDim)
MAX_DEPTH = 3                 # op_kernel/erf/x.h
BINDING_LIBRARY = "libkernels.so"
# The least time each step of the flow gets (msopgen, build.sh, the package install, the binding), whatever the
# build timeout (VerifyConfig.project_build_timeout_s replaces it). What it rests on, none of it measured here:
# build.sh configures a CMake project and compiles the host side (op_host's tiling and op definition, the generated
# op API and proto) with g++, then the kernel once per dtype the OpDef lists and per SoC with bisheng, then packs
# a .run: minutes, not the seconds of a kernel-launch build (ASCEND.md: "much slower than kernel-launch").
# NPUKernelBench, which builds its answers with this flow on Ascend hosts, declares 400 s per compile
# (base_config.yaml, compile.timeout) and applies 1200 s (run_multi_test.py passes chat.timeout to batch_compile),
# with up to 128 builds at once; MultiKernelBench sets no limit on build.sh. 900 s lies between the two for one
# build at a time. bench/npu_check.py prints the build time of a golden answer: the first workstation run
# should replace this with a measurement.
BUILD_MIN_TIMEOUT_S = 900.0
BUILD_SCRIPT = "_evokernel_build.sh"
OP_JSON = "_evokernel_op.json"
PROJECT = "_evokernel_project"     # msopgen's output folder
VENDOR = "vendor"                  # the private install (--install-path)
VENDOR_NAME = "customize"          # msopgen's default vendor_name (CMakePresets.json)
OPP_PATH = f"{VENDOR}/vendors/{VENDOR_NAME}"
OP_API_LIB = f"{OPP_PATH}/op_api/lib"
OP_API_INCLUDE = f"{OPP_PATH}/op_api/include"
# What the binding links: the package's op API (libcust_opapi.so), ACL, and the aclnn base (aclCreateTensor).
BINDING_LIBRARIES = ("cust_opapi", "ascendcl", "nnopbase")

_OP_ADD = re.compile(r"\bOP_ADD\s*\(\s*(\w+)")
_TILING_DEF = re.compile(r"\bBEGIN_TILING_DATA_DEF\s*\(")
_KERNEL = re.compile(r"__global__\s+__aicore__|__aicore__\s+__global__")
_EXTERN_C = re.compile(r'extern\s*"C"')


class ProjectError(ValueError):
    """A custom-op candidate that misses a piece or holds one twice, in one actionable sentence."""


def is_project(files: dict[str, str] | list[str]) -> bool:
    """Whether a candidate's files are written in the custom-op project form (anything under op_host/ or
    op_kernel/)."""
    return any(name.split("/", 1)[0] in PROJECT_DIRS and "/" in name for name in files)


def snake_case(op: str) -> str:
    """msopgen's file and kernel name for an op type: ``AddCustom`` -> ``add_custom``, ``TopKV3`` -> ``top_kv3``."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", op)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()


@dataclass(frozen=True)
class OpIO:
    """One input or output of the op definition."""

    name: str
    param_type: str                   # "required", "optional", "dynamic"
    dtypes: tuple[str, ...]           # msopgen's names: "float16", "float", "bfloat16", "int32"...
    formats: tuple[str, ...]          # "ND", "NCHW"...


@dataclass(frozen=True)
class OpSpec:
    """The op definition (``class X : public OpDef``) as far as msopgen's JSON needs it."""

    op: str
    inputs: tuple[OpIO, ...]
    outputs: tuple[OpIO, ...]
    attrs: tuple[tuple[str, str, str], ...]     # (name, param_type, type)


# ge::DT_* -> msopgen's JSON type names.
_DTYPES = {"FLOAT": "float", "FLOAT16": "float16", "BF16": "bfloat16", "DOUBLE": "double", "INT8": "int8",
           "INT16": "int16", "INT32": "int32", "INT64": "int64", "UINT8": "uint8", "UINT16": "uint16",
           "UINT32": "uint32", "UINT64": "uint64", "BOOL": "bool", "COMPLEX64": "complex64",
           "COMPLEX128": "complex128", "INT4": "int4"}
_ATTR_TYPES = {"Int": "int", "Float": "float", "Bool": "bool", "String": "string", "ListInt": "listInt",
               "ListFloat": "listFloat", "ListBool": "listBool", "ListListInt": "listListInt", "Type": "type"}


def _code(text: str) -> str:
    """The text as the compiler reads it, comments blanked (string literals kept: names live in them)."""
    return scan(splice(text)[0]).no_comments


def _chain(code: str, start: int) -> str:
    """The method chain that starts at ``start`` (``this->Input("x").ParamType(...)...``), up to its ``;``."""
    depth = 0
    for i in range(start, len(code)):
        c = code[i]
        depth += c in "({["
        depth -= c in ")}]"
        if c == ";" and depth == 0:
            return code[start:i]
    return code[start:]


def _call_args(chain: str, method: str) -> str | None:
    m = re.search(rf"\.\s*{method}\s*\(", chain)
    if not m:
        return None
    depth, i = 1, m.end()
    while i < len(chain) and depth:
        depth += chain[i] == "("
        depth -= chain[i] == ")"
        i += 1
    return chain[m.end():i - 1]


def parse_op_def(text: str) -> OpSpec:
    """The op definition of a host source: the class ``OP_ADD`` registers, its ``Input``/``Output``
    chains (name, ParamType, DataType, Format) and ``Attr`` chains. Raises ProjectError when absent."""
    code = _code(text)
    m = _OP_ADD.search(code)
    if not m:
        raise ProjectError("no op definition: the op_host source must define class <Op> : public OpDef and "
                           "register it with OP_ADD(<Op>)")
    op = m.group(1)
    cls = re.search(rf"\bclass\s+{op}\s*:\s*public\s+(?:\w+::)*OpDef\b", code)
    body = code[cls.end():m.start()] if cls else code[:m.start()]
    ios: dict[str, list[OpIO]] = {"Input": [], "Output": []}
    attrs: list[tuple[str, str, str]] = []
    for call in re.finditer(r"\b(Input|Output|Attr)\s*\(\s*\"([^\"]+)\"\s*\)", body):
        chain = _chain(body, call.start())
        kind, name = call.group(1), call.group(2)
        param = (_call_args(chain, "AttrType" if kind == "Attr" else "ParamType") or "REQUIRED"
                 ).strip().split("::")[-1].lower()
        if kind == "Attr":
            m_attr = re.search(r"\.\s*(" + "|".join(_ATTR_TYPES) + r")\s*\(", chain)
            attrs.append((name, param, _ATTR_TYPES[m_attr.group(1)] if m_attr else "unknown"))
            continue
        dtypes = tuple(_DTYPES.get(d, d.lower()) for d in re.findall(r"DT_(\w+)", _call_args(chain, "DataType") or ""))
        formats = tuple(re.findall(r"FORMAT_(\w+)", _call_args(chain, "Format") or ""))
        ios[kind].append(OpIO(name, param, dtypes, formats or ("ND",) * len(dtypes)))
    if not ios["Input"] and not ios["Output"]:
        raise ProjectError(f"op definition {op} declares no Input or Output")
    return OpSpec(op, tuple(ios["Input"]), tuple(ios["Output"]), tuple(attrs))


def op_json(spec: OpSpec) -> str:
    """msopgen's op description (``msopgen gen -i``) for ``spec``."""
    def desc(io: OpIO) -> dict[str, object]:
        return {"name": io.name, "param_type": io.param_type, "format": list(io.formats), "type": list(io.dtypes)}

    entry: dict[str, object] = {"op": spec.op, "language": "cpp",
                                "input_desc": [desc(io) for io in spec.inputs],
                                "output_desc": [desc(io) for io in spec.outputs]}
    if spec.attrs:
        entry["attr"] = [{"name": n, "param_type": p, "type": t} for n, p, t in spec.attrs]
    return json.dumps([entry], indent=4) + "\n"


@dataclass(frozen=True)
class OpProject:
    """Where each piece of a custom-op candidate is."""

    op: str                       # the op type OP_ADD registers ("AddCustom")
    definition: str               # op_host source with the op definition (and usually TilingFunc)
    tiling: str                   # op_host header with BEGIN_TILING_DATA_DEF
    kernels: tuple[str, ...]      # op_kernel sources with a __global__ __aicore__ entry
    json: str | None              # the op description, when given
    binding: str | None           # the top-level .cpp with the extern "C" launchers
    cmake: str | None             # the per-op CMakeLists.txt, when given
    spec: OpSpec

    @property
    def snake(self) -> str:
        return snake_case(self.op)


def _one(found: list[str], what: str, how: str) -> str:
    if not found:
        raise ProjectError(f"the custom-op project has no {what}: {how}")
    if len(found) > 1:
        raise ProjectError(f"the custom-op project has {len(found)} {what}s ({', '.join(sorted(found))}); keep one")
    return found[0]


def read_project(files: dict[str, str], *, binding: bool = True) -> OpProject:
    """The pieces of a custom-op candidate, found by what they hold; ProjectError names a missing or doubled
    piece. ``binding``: whether the binding is required (the survey of suites that ship their own checks
    the op pieces alone)."""
    host = {n: t for n, t in files.items() if n.startswith(f"{HOST_DIR}/")}
    kernel = {n: t for n, t in files.items() if n.startswith(f"{KERNEL_DIR}/")}
    definition = _one([n for n, t in host.items() if n.endswith(PROJECT_SOURCES) and _OP_ADD.search(_code(t))],
                      "op definition", f"add {HOST_DIR}/<op>.cpp with class <Op> : public OpDef, TilingFunc and "
                      "OP_ADD(<Op>)")
    tiling = _one([n for n, t in host.items() if _TILING_DEF.search(_code(t))], "tiling data definition",
                  f"add {HOST_DIR}/<op>_tiling.h with BEGIN_TILING_DATA_DEF(<Op>TilingData) ... "
                  "REGISTER_TILING_DATA_CLASS(<Op>, <Op>TilingData)")
    kernels = sorted(n for n, t in kernel.items() if n.endswith(PROJECT_SOURCES) and _KERNEL.search(_code(t)))
    if not kernels:
        raise ProjectError(f"the custom-op project has no device kernel: add {KERNEL_DIR}/<op>.cpp with "
                           'extern "C" __global__ __aicore__ void <op>(GM_ADDR x, ..., GM_ADDR workspace, '
                           "GM_ADDR tiling)")
    top = [n for n in files if "/" not in n]
    jsons = [n for n in top if n.endswith(".json")]
    op_json_name = _one(jsons, "op description JSON", "") if jsons else None
    found = [n for n in top if n.endswith(".cpp") and _EXTERN_C.search(_code(files[n]))]
    bind: str | None = None
    if found or binding:
        bind = _one(found, "binding", 'add one top-level .cpp whose extern "C" launchers call aclnn<Op> '
                    "(model.py calls them through verifier.runtime)")
    spec = parse_op_def(files[definition])
    snake = snake_case(spec.op)
    entry = f"{KERNEL_DIR}/{snake}.cpp"
    # CANN's flow compiles op_kernel/<op_snake>.cpp and launches the entry of that name (every answer of the
    # public suites is so named)
    if entry not in files or not re.search(rf"(?<!\w)void\s+{snake}\s*\(", _code(files[entry])):
        raise ProjectError(f"{entry} must define the kernel entry of op {spec.op}: extern \"C\" __global__ "
                           f"__aicore__ void {snake}(GM_ADDR ..., GM_ADDR workspace, GM_ADDR tiling) (CANN's build "
                           f"compiles {entry} and launches {snake}; found: {', '.join(kernels)})")
    return OpProject(spec.op, definition, tiling, tuple(kernels), op_json_name, bind,
                     "CMakeLists.txt" if "CMakeLists.txt" in files else None, spec)


def check_project_layout(files: dict[str, str]) -> str | None:
    """The format rules of the custom-op form beyond the common ones (sizes, NUL bytes, model.py): names
    under op_host/ and op_kernel/ (at most MAX_DEPTH deep), the kinds of file each place holds, then the
    pieces (``read_project``). None when well-formed."""
    if len(files) > MAX_PROJECT_FILES:
        return f"{len(files)} files; a custom-op project may hold at most {MAX_PROJECT_FILES}"
    part = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
    for name in files:
        parts = name.split("/")
        if len(parts) > MAX_DEPTH or not all(part.match(p) for p in parts):
            return (f"file name {name!r} is not allowed: top-level names, or names under {HOST_DIR}/ and "
                    f"{KERNEL_DIR}/ at most {MAX_DEPTH - 1} folders deep (letters, digits, '_', '.', '-')")
        if len(parts) > 1:
            if parts[0] not in PROJECT_DIRS:
                return f"{name}: a custom-op project keeps its sources in {HOST_DIR}/ and {KERNEL_DIR}/ only"
            if not name.endswith((*PROJECT_SOURCES, *PROJECT_HEADERS)):
                return (f"{name}: unexpected file type in {parts[0]}/; allowed: "
                        f"{', '.join((*PROJECT_SOURCES, *PROJECT_HEADERS))}")
        elif not (name == "model.py" or name.endswith((*PROJECT_SOURCES, *PROJECT_HEADERS, ".json"))
                  or name == "CMakeLists.txt"):
            return (f"{name}: unexpected top-level file in a custom-op project; allowed: model.py, the binding "
                    ".cpp (and its .h), the op JSON, CMakeLists.txt")
        elif name.endswith(".py") and name != "model.py":
            return f"{name}: only model.py may be Python"
    for name, text in files.items():
        if name.endswith(".json"):
            try:
                json.loads(text)
            except ValueError as exc:
                return f"{name}: not valid JSON ({exc})"
    try:
        read_project(files)
    except ProjectError as exc:
        return str(exc)
    return None


_ACLNN_CALL = re.compile(r"(?<![\w.])(aclnn\w+)\s*\(")


def binding_problem(files: dict[str, str]) -> str | None:
    """The binding may call only its own op's API (``aclnn<Op>GetWorkspaceSize``, ``aclnn<Op>``): another
    aclnn operator (CANN's built-in ``aclnnAdd``...) would compute the result without the candidate's kernel.
    None when it keeps to that, or when there is no binding to read (the format gate names that)."""
    try:
        project = read_project(files)
    except ProjectError:
        return None
    if project.binding is None:
        return None
    own = {f"aclnn{project.op}", f"aclnn{project.op}GetWorkspaceSize"}
    text = files[project.binding]
    code = scan(splice(text)[0]).code
    for m in _ACLNN_CALL.finditer(code):
        if m.group(1) not in own:
            line = code.count("\n", 0, m.start()) + 1
            return (f"{project.binding} line {line}: {m.group(1)} is not this candidate's op: the binding may call "
                    f"only aclnn{project.op}GetWorkspaceSize and aclnn{project.op} (the op that OP_ADD registers), "
                    "so the result comes from the candidate's own kernel")
    return None


def kernel_options(cmake: str) -> list[str]:
    """The options of ``add_ops_compile_options(<Op> OPTIONS ...)`` in a cann-ops per-op CMakeLists.txt."""
    out: list[str] = []
    for m in re.finditer(r"add_ops_compile_options\s*\(([^)]*)\)", cmake):
        words = m.group(1).split()
        if "OPTIONS" in words:
            out += words[words.index("OPTIONS") + 1:]
    return out


def msopgen_command(install: CannInstall, soc: str) -> list[str]:
    """Generates the project from the op JSON for ``soc`` (msopgen's ``-c ai_core-<SoC>``)."""
    return [str(install.msopgen or "msopgen"), "gen", "-i", OP_JSON, "-c", f"ai_core-{soc}", "-lan", "cpp",
            "-out", PROJECT]


def binding_command(install: CannInstall, binding: str) -> list[str]:
    """Links the binding against the private vendor's op API and ACL into the library the runtime loads;
    the library finds libcust_opapi.so through its RUNPATH ($ORIGIN), wherever the build is cached."""
    root = install.root
    return ["g++", "-shared", "-fPIC", "-O2", "-std=c++17", binding, "-o", BINDING_LIBRARY,
            f"-I{OP_API_INCLUDE}", f"-I{root}/include", f"-I{root}/include/aclnn",
            f"-L{OP_API_LIB}", f"-L{root}/lib64", "-Wl,--no-as-needed",
            *(f"-l{lib}" for lib in BINDING_LIBRARIES), f"-Wl,-rpath,$ORIGIN/{OP_API_LIB}"]


def build_script(install: CannInstall, soc: str, project: OpProject, files: list[str], cmake: str | None) -> str:
    """The generated build script: msopgen, the pieces copied in, build.sh, the private install, the binding."""
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        f"# Generated by EvoKernel for one candidate: CANN custom-op flow (op {project.op}).",
        "set -euo pipefail",
        'here="$(pwd)"',
        "# a set ASCEND_CUSTOM_OPP_PATH changes what build.sh packages",
        "unset ASCEND_CUSTOM_OPP_PATH",
        f"rm -rf {PROJECT} {VENDOR}",
        " ".join(q(a) for a in msopgen_command(install, soc)),
    ]
    for name in sorted(files):
        if name.split("/", 1)[0] in PROJECT_DIRS:
            target = f"{PROJECT}/{name}"
            lines.append(f"mkdir -p {q(str(PurePosixPath(target).parent))} && cp {q(name)} {q(target)}")
    options = kernel_options(cmake) if cmake else []
    if options:
        line = f"add_ops_compile_options(ALL OPTIONS {' '.join(options)})"
        sed = "s|^add_kernels_compile()|" + line + "\\nadd_kernels_compile()|"
        lines += ["# the options of the candidate's CMakeLists.txt, before the kernels are compiled",
                  f"sed -i {q(sed)} {PROJECT}/{KERNEL_DIR}/CMakeLists.txt"]
    lines += [
        f"(cd {PROJECT} && bash build.sh)",
        f"installer=$(ls {PROJECT}/build_out/custom_opp_*.run 2>/dev/null | head -n 1)",
        'if [ -z "$installer" ]; then echo "error: build.sh produced no build_out/custom_opp_*.run" >&2; exit 1; fi',
        f'bash "$installer" --quiet --install-path="$here/{VENDOR}"',
        f'if [ ! -d {OP_API_LIB} ]; then echo "error: the package installed no {OP_API_LIB}" >&2; exit 1; fi',
    ]
    if project.binding:
        lines.append(" ".join(q(a) if not a.startswith("-Wl,-rpath") else f"'{a}'"
                              for a in binding_command(install, project.binding)))
    return "\n".join(lines) + "\n"


CALL_VARIABLES = ("ASCEND_CUSTOM_OPP_PATH", "LD_LIBRARY_PATH")


def call_env(library_dir: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """What the process that calls a custom-op candidate's library needs: the private vendor as the custom
    OPP path (the op's kernels and tiling are found there), its op API on the library path."""
    env = env or {}
    opp = f"{library_dir}/{OPP_PATH}"
    lib = f"{library_dir}/{OP_API_LIB}"
    inherited = [env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH") else []
    return {"ASCEND_CUSTOM_OPP_PATH": opp, "LD_LIBRARY_PATH": ":".join([lib, *inherited])}


def form_prompt(backend: str, form: str) -> str:
    """What a prompt adds to ask for ``form`` on ``backend``: the custom-op project's files and what each
    holds; "" for the kernel-launch form (the system message's own) or a backend that takes one form."""
    if form != FORM_CUSTOM_OP or backend != "ascend":
        return ""
    return f"""
Answer as a CANN custom-operator project instead of kernel.cpp: these files, each in its own fenced block.
```cpp file={HOST_DIR}/<op>_tiling.h
BEGIN_TILING_DATA_DEF(<Op>TilingData) ... END_TILING_DATA_DEF; REGISTER_TILING_DATA_CLASS(<Op>, <Op>TilingData)
```
```cpp file={HOST_DIR}/<op>.cpp
TilingFunc (shapes, core count and UB size from platform_ascendc::PlatformAscendC, SetBlockDim, tiling data saved),
shape inference, and class <Op> : public OpDef {{ Input/Output/Attr ... }}; OP_ADD(<Op>);
```
```cpp file={KERNEL_DIR}/<op>.cpp
extern "C" __global__ __aicore__ void <op>(GM_ADDR x, ..., GM_ADDR workspace, GM_ADDR tiling) with GET_TILING_DATA
```
```cpp file=binding.cpp
extern "C" uint32_t <name>(aclrtStream stream, <data pointers and sizes>): wrap the pointers in aclTensors
(aclCreateTensor), call aclnn<Op>GetWorkspaceSize and aclnn<Op> on that stream (a workspace it asks for: aclrtMalloc
once and keep it), destroy the tensors, return the status
```
model.py calls the binding's entries through `lib = load()`, as for kernels. The op JSON is derived from the OpDef
(or give it as <op>.json)."""
