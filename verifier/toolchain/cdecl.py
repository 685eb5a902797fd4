"""Read the ``extern "C"`` functions a candidate's sources declare: names, parameter and return types.

The runtime uses these signatures to convert Python arguments (tensors to data pointers, numbers to
the declared C types) and to reject a wrong call with a message naming the parameter. It is a small
declaration reader, not a C++ parser: it understands what launchers look like (plain and pointer
parameters, ``const``, ``__restrict__``) and says clearly when a declaration is beyond it.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from verifier.toolchain.csource import scan, splice, split_top_level

# C scalar type -> ctypes name. Pointers to these carry a torch dtype expectation (below).
SCALARS: dict[str, str] = {
    "bool": "c_bool",
    "char": "c_byte",
    "signed char": "c_byte",
    "unsigned char": "c_ubyte",
    "int8_t": "c_int8",
    "uint8_t": "c_uint8",
    "short": "c_short",
    "int16_t": "c_int16",
    "unsigned short": "c_ushort",
    "uint16_t": "c_uint16",
    "int": "c_int",
    "int32_t": "c_int32",
    "unsigned": "c_uint",
    "unsigned int": "c_uint",
    "uint32_t": "c_uint32",
    "long": "c_long",
    "long long": "c_longlong",
    "int64_t": "c_int64",
    "unsigned long": "c_ulong",
    "unsigned long long": "c_ulonglong",
    "uint64_t": "c_uint64",
    "size_t": "c_size_t",
    "ssize_t": "c_ssize_t",
    "ptrdiff_t": "c_ssize_t",
    "float": "c_float",
    "double": "c_double",
    "void": "void",
}

# Pointer base type -> torch dtype names a tensor argument may have ("*" = any).
POINTER_DTYPES: dict[str, tuple[str, ...]] = {
    "float": ("float32",),
    "double": ("float64",),
    "int": ("int32",),
    "int32_t": ("int32",),
    "unsigned": ("int32",),
    "unsigned int": ("int32",),
    "uint32_t": ("int32", "uint32"),
    "long": ("int64",),
    "long long": ("int64",),
    "int64_t": ("int64",),
    "uint64_t": ("int64", "uint64"),
    "size_t": ("int64",),
    "short": ("int16",),
    "int16_t": ("int16",),
    "uint16_t": ("float16", "bfloat16", "int16", "uint16"),
    "int8_t": ("int8",),
    "char": ("int8", "uint8", "bool"),
    "signed char": ("int8",),
    "unsigned char": ("uint8", "bool"),
    "uint8_t": ("uint8", "bool", "*"),  # Ascend's GM_ADDR is uint8_t*: any dtype
    "bool": ("bool",),
    "void": ("*",),
    "half": ("float16",),
    "__fp16": ("float16",),
    "_Float16": ("float16",),
    "__half": ("float16",),
    "__nv_bfloat16": ("bfloat16",),
    "bfloat16_t": ("bfloat16",),
    "half_t": ("float16",),
}

# Opaque handle types passed as void* (device streams).
HANDLES = {"cudaStream_t", "aclrtStream", "void*"}

_QUALIFIERS = re.compile(
    r"\b(const|volatile|restrict|__restrict__|__restrict|__gm__|struct|__global__|__aicore__|"
    r"inline|static|__host__|__device__|__launch_bounds__\([^)]*\)|__attribute__\(\([^)]*\)\))\b"
)
_MACROS = {"GM_ADDR": "uint8_t *"}


class DeclarationError(ValueError):
    """A declaration the reader cannot turn into a callable signature."""


@dataclass(frozen=True)
class Param:
    name: str
    ctype: str       # normalised base type, e.g. "float", "int64_t", "cudaStream_t"
    pointer: bool

    def describe(self) -> str:
        return f"{self.ctype}{'*' if self.pointer else ''} {self.name}".strip()


@dataclass(frozen=True)
class Signature:
    name: str
    restype: str
    params: tuple[Param, ...]

    def describe(self) -> str:
        return f"{self.restype} {self.name}({', '.join(p.describe() for p in self.params)})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Signature:
        return cls(d["name"], d["restype"], tuple(Param(**p) for p in d["params"]))


def strip_comments_and_strings(source: str, keep_strings: bool = False) -> str:
    """``source`` as the compiler reads it (backslash-newlines joined) with comments blanked, and the
    insides of string/char literals too unless ``keep_strings``; read by the shared C lexer."""
    scanned = scan(splice(source)[0], stop_at_open=False)
    return scanned.no_comments if keep_strings else scanned.code


def _matching(text: str, start: int, open_: str = "{", close: str = "}") -> int:
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_:
            depth += 1
        elif text[i] == close:
            depth -= 1
            if depth == 0:
                return i
    return len(text)


def _normalise_type(text: str) -> tuple[str, bool]:
    for macro, expansion in _MACROS.items():
        text = re.sub(rf"\b{macro}\b", expansion, text)
    pointer = "*" in text or "&" in text
    base = _QUALIFIERS.sub(" ", text.replace("*", " ").replace("&", " "))
    base = re.sub(r"\bstd::", "", base)
    base = " ".join(base.split())
    return base, pointer


def _parse_params(text: str, func: str, aliases: dict[str, str] | None = None) -> tuple[Param, ...]:
    text = text.strip()
    if text in ("", "void"):
        return ()
    params = []
    for index, raw in enumerate(split_top_level(text, "()<>[]")):
        raw = raw.split("=")[0].strip()
        array = "[" in raw  # float x[] is a pointer
        if array:
            raw = raw[: raw.index("[")].strip()
        m = re.match(r"^(.*?)([A-Za-z_]\w*)\s*$", raw, re.S)
        if not m or not m.group(1).strip() or m.group(1).strip() in ("const",):
            type_text, name = raw, f"arg{index}"
        else:
            type_text, name = m.group(1), m.group(2)
        base, pointer = _normalise_type(type_text)
        pointer = pointer or array
        base, through = _resolved(base, aliases or {})
        pointer = pointer or through
        if base in HANDLES or base.endswith("Stream_t"):
            params.append(Param(name, base, True))
            continue
        if base not in SCALARS and base not in POINTER_DTYPES:
            raise DeclarationError(
                f'extern "C" {func}: parameter {index + 1} ({raw.strip()}) has type {base!r}; '
                "launchers take plain numbers and pointers (float*, int64_t, ...)"
                + (f": a template parameter cannot be a launcher's type; write one extern \"C\" launcher per "
                   f"type, calling the template (extern \"C\" void {func}_f32(const float* x, ...) "
                   f"{{ {func}<float>(x, ...); }}), or generate them with a macro"
                   if re.fullmatch(r"[A-Z]\w{0,2}", base) else "")
            )
        if base == "void" and not pointer:
            raise DeclarationError(f'extern "C" {func}: parameter {index + 1} is void')
        params.append(Param(name, base, pointer))
    return tuple(params)


_HEADER = re.compile(r"([A-Za-z_][\w\s\*&:<>]*?)\b([A-Za-z_]\w*)\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\)"
                     r"\s*(?:noexcept\s*)?([{;])")


def _headers_in(segment: str) -> list[tuple[str, str, str]]:
    """Function headers at brace depth 0 of ``segment``: (return type text, name, params)."""
    found = []
    depth, i, start = 0, 0, 0
    flat = []  # depth-0 text with bodies removed
    while i < len(segment):
        ch = segment[i]
        if ch == "{":
            if depth == 0:
                flat.append(segment[start : i + 1] + ";")
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                start = i + 1
        i += 1
    if depth == 0:
        flat.append(segment[start:])
    for piece in flat:
        for m in _HEADER.finditer(piece):
            ret = m.group(1).strip()
            if not ret or ret.split()[-1] in ("return", "else", "new"):
                continue
            found.append((ret, m.group(2), m.group(3)))
    return found


_ALIAS = re.compile(r"(?:^|[;{}])\s*(?:typedef\s+([^;{}()]+?)\s+([A-Za-z_]\w*)\s*;|"
                    r"using\s+([A-Za-z_]\w*)\s*=\s*([^;{}()]+?)\s*;)")


def type_aliases(text: str) -> dict[str, str]:
    """The plain type aliases ``text`` declares (``typedef uint16_t bf16_t;``, ``using half_t = _Float16;``):
    alias -> the type it names, as written (a template's aliases are not plain: left out)."""
    out: dict[str, str] = {}
    for m in _ALIAS.finditer(text):
        alias, target = (m.group(2), m.group(1)) if m.group(2) else (m.group(3), m.group(4))
        if "<" not in target and "template" not in target:
            out[alias] = " ".join(target.split())
    return out


def _resolved(base: str, aliases: dict[str, str]) -> tuple[str, bool]:
    """``base`` through the source's plain aliases to a type the runtime knows (and whether one of them was a
    pointer: ``typedef float* fptr;``); as it is when it names none."""
    pointer = False
    for _ in range(8):   # aliases of aliases, never a loop
        if base in SCALARS or base in POINTER_DTYPES or base not in aliases or base in HANDLES \
                or base.endswith("Stream_t"):   # a stream handle stays one, however its header spells it
            break
        base, through = _normalise_type(aliases[base])
        pointer = pointer or through
    return base, pointer


def parse_extern_c(source: str) -> list[Signature]:
    """Every ``extern "C"`` function declared or defined in ``source``, in order; a parameter's type may be a plain
    alias the source declares (``using half_t = _Float16;``)."""
    text = strip_comments_and_strings(source, keep_strings=True)
    aliases = type_aliases(text)
    sigs: list[Signature] = []
    seen: set[str] = set()
    for m in re.finditer(r'extern\s*"C"\s*', text):   # extern"C" is the same to the compiler
        pos = m.end()
        if pos < len(text) and text[pos] == "{":
            end = _matching(text, pos)
            headers = _headers_in(text[pos + 1 : end])
        else:
            stop = min((k for k in (text.find("{", pos), text.find(";", pos)) if k >= 0), default=len(text))
            headers = _headers_in(text[pos : stop + 1])[:1]
        for ret, name, params in headers:
            if name in seen:
                continue
            restype, pointer = _normalise_type(ret)
            if pointer:
                restype = "void*"
            elif restype not in SCALARS:
                raise DeclarationError(f'extern "C" {name}: return type {ret!r} is not a plain C type')
            sigs.append(Signature(name, restype, _parse_params(params, name, aliases)))
            seen.add(name)
    return sigs


_LAUNCH_ATTRIBUTES = re.compile(r"__(?:launch_bounds|maxnreg|cluster_dims)__\s*\([^)]*\)")


def global_functions(source: str, qualifier: str = "__global__") -> list[str]:
    """Names of functions declared with ``qualifier`` in ``source``, in order: ``__global__`` finds
    device kernels (CUDA or Ascend C), ``__device__`` CUDA device functions."""
    text = _LAUNCH_ATTRIBUTES.sub(" ", strip_comments_and_strings(source))
    pattern = re.compile(rf"{re.escape(qualifier)}\s+(?:[\w:<>,\*&\s]*?\s)?([A-Za-z_]\w*)\s*\(")
    names: list[str] = []
    for m in pattern.finditer(text):
        name = m.group(1)
        if qualifier == "__device__" and "__host__" in text[max(0, m.start() - 40): m.end()]:
            continue  # __host__ __device__: callable from the host too
        if name not in names:
            names.append(name)
    return names
