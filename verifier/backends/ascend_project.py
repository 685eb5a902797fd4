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

from verifier.toolchain.cann import CannInstall, soc_family
from verifier.toolchain.csource import scan, splice, split_top_level

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
    dtypes: tuple[str, ...]           # msopgen's names: "float16", "float", "bfloat16", "int32"...; () when unresolved
    formats: tuple[str, ...]          # "ND", "NCHW"...


@dataclass(frozen=True)
class OpAttr:
    """One attribute of the op definition."""

    name: str
    param_type: str                   # "required", "optional"
    type: str                         # msopgen's name: "int", "float", "bool", "string", "list_int"...
    default: object = None            # the default the OpDef gives (``.Float(1.0)``), None when it gives none


@dataclass(frozen=True)
class OpSpec:
    """The op definition (``class X : public OpDef``) as far as msopgen's JSON needs it."""

    op: str
    inputs: tuple[OpIO, ...]
    outputs: tuple[OpIO, ...]
    attrs: tuple[OpAttr, ...]


# ge::DT_* -> msopgen's JSON type names (msopgen's config/transform.json, INPUT_OUTPUT_DTYPE_MAP: the names it
# knows; a type outside it, int4 or the float8 kinds, is one msopgen refuses).
_DTYPES = {"FLOAT": "float", "FLOAT16": "float16", "BF16": "bfloat16", "DOUBLE": "double", "INT8": "int8",
           "INT16": "int16", "INT32": "int32", "INT64": "int64", "UINT8": "uint8", "UINT16": "uint16",
           "UINT32": "uint32", "UINT64": "uint64", "BOOL": "bool", "COMPLEX32": "complex32",
           "COMPLEX64": "complex64", "COMPLEX128": "complex128", "UINT1": "uint1", "INT2": "int2"}
# OpAttrDef's methods -> msopgen's attribute type names (IR_ATTR_TYPE_MAP) and the default given when the OpDef
# gives none (msopgen writes an optional attribute's default_value verbatim into the OpDef it generates).
_ATTR_TYPES: dict[str, tuple[str, object]] = {
    "Int": ("int", 0), "Float": ("float", 0.0), "Bool": ("bool", False), "String": ("string", ""),
    "ListInt": ("list_int", []), "ListFloat": ("list_float", []), "ListBool": ("list_bool", []),
    "ListListInt": ("list_list_int", []), "Type": ("type", "float")}
# The placeholder type and format of every input and output when the OpDef's lists cannot be read (a variable
# msopgen's JSON cannot name, a type msopgen does not know, lists of different lengths): msopgen only needs one
# consistent description to write its project, and the candidate's op_host sources (the OpDef the build
# registers) replace the sources msopgen writes from it.
PLACEHOLDER_IO = (("float",), ("ND",))


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


def _listed(args: str | None, code: str, pattern: str) -> tuple[str, ...] | None:
    """The names ``pattern`` captures in a list argument (``{ge::DT_FLOAT, ge::DT_FLOAT16}``), or in the braces
    a variable of that name is initialised with elsewhere in the source (``TYPES`` ->
    ``static const std::vector<ge::DataType> TYPES = {...}``); None when neither says."""
    if args is None:
        return None
    found = re.findall(pattern, args)
    if found:
        return tuple(found)
    name = args.strip().strip("{}").strip()
    if re.fullmatch(r"[A-Za-z_]\w*", name):
        m = re.search(rf"\b{name}\b\s*(?:=\s*(?:[\w:<>\s]+)?)?\{{([^{{}}]*)\}}", code)
        if m:
            found = re.findall(pattern, m.group(1))
            return tuple(found) or None
    return None


def _literal(text: str | None, kind: str) -> object:
    """The default an attribute method is given (``.Float(1.0)``, ``.ListInt({1, 2})``, ``.String("mean")``) as
    JSON, or None when it is not a literal msopgen could write into C++ (no argument, a name, an expression)."""
    if text is None or not text.strip():
        return None
    text = text.strip()
    number = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
    if kind.startswith("List"):
        m = re.fullmatch(r"(?:std::vector<[^>]*>\s*)?\{(.*)\}", text, re.S)
        if not m:
            return None
        items = [i.strip() for i in m.group(1).split(",") if i.strip()]
        values = [_literal(i, kind[4:]) for i in items]
        return None if any(v is None for v in values) else values
    if kind == "Bool":
        return {"true": True, "false": False}.get(text)
    if kind == "String":
        m = re.fullmatch(r'"([^"\\]*)"', text)
        return m.group(1) if m else None
    m = re.fullmatch(rf"({number})[fFlLuU]*", text)
    if not m:
        return None
    value = float(m.group(1))
    return int(value) if kind == "Int" and value.is_integer() else value


def parse_op_def(text: str) -> OpSpec:
    """The op definition of a host source: the class ``OP_ADD`` registers, its ``Input``/``Output``
    chains (name, ParamType, DataType, Format; a list given by a variable is read where the source initialises
    it) and ``Attr`` chains (name, AttrType, type, default). Raises ProjectError when absent."""
    code = _code(text)
    m = _OP_ADD.search(code)
    if not m:
        raise ProjectError("no op definition: the op_host source must define class <Op> : public OpDef and "
                           "register it with OP_ADD(<Op>)")
    op = m.group(1)
    cls = re.search(rf"\bclass\s+{op}\s*:\s*public\s+(?:\w+::)*OpDef\b", code)
    body = code[cls.end():m.start()] if cls else code[:m.start()]
    ios: dict[str, list[OpIO]] = {"Input": [], "Output": []}
    attrs: list[OpAttr] = []
    for call in re.finditer(r"\b(Input|Output|Attr)\s*\(\s*\"([^\"]+)\"\s*\)", body):
        chain = _chain(body, call.start())
        kind, name = call.group(1), call.group(2)
        param = (_call_args(chain, "AttrType" if kind == "Attr" else "ParamType") or "REQUIRED"
                 ).strip().split("::")[-1].lower()
        if kind == "Attr":
            m_attr = re.search(r"\.\s*(" + "|".join(_ATTR_TYPES) + r")\s*\(", chain)
            method = m_attr.group(1) if m_attr else "Int"
            attrs.append(OpAttr(name, param, _ATTR_TYPES[method][0] if m_attr else "unknown",
                                _literal(_call_args(chain, method), method)))
            continue
        types = _listed(_call_args(chain, "DataType") or _call_args(chain, "DataTypeList"), code, r"DT_(\w+)")
        dtypes = tuple(_DTYPES.get(d, "") for d in types or ())
        formats = _listed(_call_args(chain, "Format") or _call_args(chain, "FormatList"), code, r"FORMAT_(\w+)")
        ios[kind].append(OpIO(name, param, dtypes if all(dtypes) else (), formats or ()))
    if not ios["Input"] and not ios["Output"]:
        raise ProjectError(f"op definition {op} declares no Input or Output")
    return OpSpec(op, tuple(ios["Input"]), tuple(ios["Output"]), tuple(attrs))


def _msopgen_lists(spec: OpSpec) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """(types, formats) per input and output as msopgen takes them: every list known to msopgen, each format list
    as long as its type list (a single format scales), and every input and output with as many types as the
    first; else the placeholder (``PLACEHOLDER_IO``) for all of them."""
    lists = {}
    for io in (*spec.inputs, *spec.outputs):
        formats = io.formats or ("ND",)
        if len(formats) == 1:
            formats = formats * len(io.dtypes)
        lists[io.name] = (io.dtypes, formats)
    counts = {(len(t), len(f)) for t, f in lists.values()}
    if len(counts) == 1 and all(t and len(t) == len(f) for t, f in lists.values()):
        return lists
    return {name: PLACEHOLDER_IO for name in lists}


# Characters msopgen refuses in a default value (it writes the value into C++).
_UNSAFE_DEFAULT = re.compile(r"[;'\"()\n\r\t`]")


def op_json(spec: OpSpec) -> str:
    """msopgen's op description (``msopgen gen -i``) for ``spec``, complete as msopgen's documentation asks:
    type and format lists of each input and output that correspond and agree in number across all of them
    (``_msopgen_lists``), attribute types by msopgen's names, and a ``default_value`` for every optional
    attribute (the OpDef's own, else the type's zero)."""
    lists = _msopgen_lists(spec)

    def desc(io: OpIO) -> dict[str, object]:
        types, formats = lists[io.name]
        return {"name": io.name, "param_type": io.param_type, "format": list(formats), "type": list(types)}

    def attr(a: OpAttr) -> dict[str, object]:
        out: dict[str, object] = {"name": a.name, "param_type": a.param_type, "type": a.type}
        if a.param_type == "optional":
            zero = next((d for t, d in _ATTR_TYPES.values() if t == a.type), 0)
            default = a.default if a.default is not None and not _UNSAFE_DEFAULT.search(str(a.default)) else zero
            out["default_value"] = default
        return out

    entry: dict[str, object] = {"op": spec.op, "language": "cpp",
                                "input_desc": [desc(io) for io in spec.inputs],
                                "output_desc": [desc(io) for io in spec.outputs]}
    if spec.attrs:
        entry["attr"] = [attr(a) for a in spec.attrs if a.type != "unknown"]
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


# Where CANN states each rule the format gate holds a project to (before a build of minutes would find it).
WRAPPER_SOURCE = ("CANN's generated kernel wrapper calls it by position: asc-devkit "
                  "tools/build/asc_op_compile_base/asc_op_compiler/ascendc_compile_gen_code.py, "
                  "gen_usr_origin_kernel_function_call")
DTYPE_SOURCE = "asc-devkit cmake/asc/fwk_modules/util/ascendc_impl_build.py, get_dtype_fmt_options"
TILING_SOURCE = ("the tiling data is found by the op type it is registered for: Ascend C API reference, "
                 "REGISTER_TILING_DATA_CLASS(op_type, class_name)")
CONFIG_SOURCE = ("msopgen's SOC_VERSION_TYPE (Ascend/msopgen msopgen/config/transform.json) names each SoC's "
                 "AddConfig; the op is built only for the SoCs its OpDef adds")
_GM = re.compile(r"\bGM_ADDR\b|__gm__")
_DTYPE_USE = re.compile(r"\b(?:ORIG_)?DTYPE_([A-Za-z0-9_]+)")


def _unique(ios: tuple[OpIO, ...]) -> list[str]:
    """The names of ``ios`` in order, each once (an OpDef may declare its inputs again per AICore config)."""
    return list(dict.fromkeys(io.name for io in ios))


def kernel_parameters(project: OpProject, files: dict[str, str]) -> list[str]:
    """The parameters of the kernel entry ``void <snake>(...)`` in op_kernel/<snake>.cpp, as written."""
    code = _code(files[f"{KERNEL_DIR}/{project.snake}.cpp"])
    m = re.search(rf"(?<!\w)void\s+{project.snake}\s*\(", code)
    if not m:
        return []
    depth, i = 1, m.end()
    while i < len(code) and depth:
        depth += code[i] == "("
        depth -= code[i] == ")"
        i += 1
    inside = code[m.end():i - 1]
    return [p.strip() for p in split_top_level(inside)] if inside.strip() and inside.strip() != "void" else []


def entry_problem(project: OpProject, files: dict[str, str]) -> str | None:
    """The kernel entry against the call CANN makes: global-memory addresses only (``GM_ADDR``), one per input and
    output of the OpDef in its order (``nullptr`` for an absent optional input), then workspace and tiling."""
    entry = f"{KERNEL_DIR}/{project.snake}.cpp"
    params = kernel_parameters(project, files)
    inputs, outputs = _unique(project.spec.inputs), _unique(project.spec.outputs)
    want = [*inputs, *outputs, "workspace", "tiling"]
    for param in params:
        if not _GM.search(param):
            return (f"{entry}: parameter '{param}' of {project.snake} is not a global-memory address: "
                    f"{WRAPPER_SOURCE}, with GM_ADDR arguments only ({', '.join(want)}); pass a scalar through the "
                    "tiling data")
    shape_out = "OutputShapeDependOnCompute" in _code(files[project.definition])   # one more: the output shape
    if len(params) != len(want) and not (shape_out and len(params) == len(want) + 1):
        return (f"{entry}: {project.snake} takes {len(params)} parameters, and CANN passes {len(want)}: "
                f"{', '.join(want)} (inputs, then outputs, in the OpDef's order; nullptr for an absent optional "
                f"input); {WRAPPER_SOURCE}")
    names = [p.split()[-1].lstrip("*&") if p.split() else "" for p in params[:len(inputs) + len(outputs)]]
    ios = [*inputs, *outputs]
    if len(set(ios)) == len(ios) and sorted(names) == sorted(ios) and names != ios:
        return (f"{entry}: {project.snake} names the OpDef's inputs and outputs in another order ({', '.join(names)}); "
                f"CANN passes them by position as {', '.join(want)}; {WRAPPER_SOURCE}")
    return None


def dtype_problem(project: OpProject, files: dict[str, str]) -> str | None:
    """``DTYPE_<NAME>`` (and ``ORIG_DTYPE_<NAME>``) in the kernel entry's source name an input or output of the OpDef:
    CANN's kernel compile defines them for those alone (``<NAME>_REF`` for an output named like an input). Headers
    are not held to it: a header may serve sibling ops (NPUKernelBench's Foreach*ScalarList golden answers use
    DTYPE_SCALAR in a header their entry includes), and a refusal here must never stop what CANN builds."""
    inputs = [n.upper() for n in _unique(project.spec.inputs)]
    outputs = [n.upper() for n in _unique(project.spec.outputs)]
    known = {*inputs, *outputs, *(f"{n}_REF" for n in outputs if n in inputs)}
    for name in [f"{KERNEL_DIR}/{project.snake}.cpp"]:
        code = _code(files[name])
        own = set(re.findall(r"#\s*define\s+(?:ORIG_)?DTYPE_(\w+)", code))
        for line in code.splitlines():
            if line.lstrip().startswith("#"):
                continue             # #ifdef DTYPE_X asks whether CANN defined it
            for m in _DTYPE_USE.finditer(line):
                if m.group(1) not in known and m.group(1) not in own:
                    return (f"{name}: DTYPE_{m.group(1)} names no input or output of {project.op} "
                            f"({', '.join(sorted(known))}): CANN's kernel compile defines DTYPE_<NAME> only for the "
                            f"OpDef's inputs and outputs ({DTYPE_SOURCE})")
    return None


def tiling_problem(project: OpProject, files: dict[str, str]) -> str | None:
    """The tiling data is registered for the op type ``OP_ADD`` registers (``<Op>`` or ``<Op>_<tiling key>``)."""
    code = _code(files[project.tiling])
    names = re.findall(r"\bREGISTER_TILING_DATA_CLASS\s*\(\s*(\w+)", code)
    if not names:
        return (f"{project.tiling}: no REGISTER_TILING_DATA_CLASS({project.op}, <TilingData>): {TILING_SOURCE}")
    if not any(n == project.op or re.fullmatch(rf"{project.op}_\d+", n) for n in names):
        # other names are structs the op's tiling data holds (TILING_DATA_FIELD_DEF_STRUCT registers them too)
        return (f"{project.tiling}: the tiling data is registered for {', '.join(names)}, never for {project.op}, the "
                f"op type OP_ADD registers: {TILING_SOURCE} (REGISTER_TILING_DATA_CLASS({project.op}, <TilingData>), "
                "or <Op>_<tiling key>)")
    return None


def config_problem(project: OpProject, files: dict[str, str], soc: str) -> str | None:
    """The OpDef's ``AICore().AddConfig(...)`` covers the SoC the build targets (its family: ``soc_family``)."""
    family = soc_family(soc)
    configs = re.findall(r"\.\s*AddConfig\s*\(\s*\"([^\"]+)\"", _code(files[project.definition]))
    if family in [c.lower() for c in configs]:
        return None
    added = ", ".join(f'AddConfig("{c}")' for c in configs) or "no AddConfig"
    return (f"{project.definition}: the OpDef of {project.op} has {added}, none for this machine's {soc} "
            f'(this->AICore().AddConfig("{family}")): no kernel would be built for it; {CONFIG_SOURCE}')


def project_problem(files: dict[str, str], target: str | None = None) -> str | None:
    """What CANN would refuse, or call wrongly, in a project that ``read_project`` reads: the kernel entry's
    positional contract, the DTYPE_ names, the tiling data's op type and (with ``target``, the SoC the build
    targets) the OpDef's AddConfig. None when all hold."""
    project = read_project(files)
    return (entry_problem(project, files) or dtype_problem(project, files) or tiling_problem(project, files)
            or (config_problem(project, files, target) if target else None))


def check_project_layout(files: dict[str, str], target: str | None = None) -> str | None:
    """The format rules of the custom-op form beyond the common ones (sizes, NUL bytes, model.py): names
    under op_host/ and op_kernel/ (at most MAX_DEPTH deep), the kinds of file each place holds, the pieces
    (``read_project``), then what CANN would refuse or call wrongly (``project_problem``; ``target``: the SoC
    the build targets). None when well-formed."""
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
            if parts[0] == HOST_DIR and len(parts) > 2 and name.endswith(PROJECT_SOURCES):
                return (f"{name}: CANN's op_host/CMakeLists.txt compiles only the sources at the top level of "
                        f"{HOST_DIR}/ (aux_source_directory), never one in a subfolder: move it to {HOST_DIR}/ "
                        "or make it a header")
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
        return project_problem(files, target)
    except ProjectError as exc:
        return str(exc)


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


def build_script(install: CannInstall, soc: str, project: OpProject, files: list[str], cmake: str | None,
                 python: str | None = None) -> str:
    """The generated build script: msopgen, its template sources removed, the pieces copied in, build.sh, the
    private install, the binding. ``python``: the toolkit's Python, put first on PATH (msopgen and build.sh run
    the first ``python3`` there, and CANN's Python packages need CANN's Python requirements)."""
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        f"# Generated by EvoKernel for one candidate: CANN custom-op flow (op {project.op}).",
        "set -euo pipefail",
        'here="$(pwd)"',
        "# a set ASCEND_CUSTOM_OPP_PATH changes what build.sh packages",
        "unset ASCEND_CUSTOM_OPP_PATH",
    ]
    if python:
        lines += ["# msopgen and build.sh run the first python3 on PATH: the toolkit's (CANN's Python requirements)",
                  f'export PATH={q(str(PurePosixPath(python).parent))}:"$PATH"']
    lines += [
        f"rm -rf {PROJECT} {VENDOR}",
        " ".join(q(a) for a in msopgen_command(install, soc)),
        "# msopgen's template sources go: op_host/CMakeLists.txt compiles every top-level source of op_host/",
        "# (aux_source_directory), and the candidate's own sources are the op, whatever their names",
        f"find {PROJECT}/{HOST_DIR} {PROJECT}/{KERNEL_DIR} -maxdepth 1 -type f ! -name CMakeLists.txt -delete",
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
        'installer=""',
        f'for f in {PROJECT}/build_out/custom_opp_*.run; do if [ -e "$f" ]; then installer="$f"; break; fi; done',
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
