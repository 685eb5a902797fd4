"""Stand-in for the kernel compile step of the op project (cmake/util/ascendc_compile_kernel.py under the presets'
ASCEND_PYTHON_EXECUTABLE): it imports CANN's Python packages (tbe), which need CANN's Python requirements, and for
each op type the op_host sources register, refuses what the real compile refuses or builds wrongly:

* op_kernel/<snake>.cpp must exist (CANN compiles that name);
* its entry ``<snake>(...)`` is called by CANN's generated wrapper by position, with a global-memory address for
  each input and output of the op, then the workspace and the tiling (asc-devkit
  tools/build/asc_op_compile_base/asc_op_compiler/ascendc_compile_gen_code.py, gen_usr_origin_kernel_function_call):
  a scalar parameter does not compile against that call, another count does not either, and inputs named in
  another order would build and compute garbage;
* the compile defines DTYPE_<NAME> / ORIG_DTYPE_<NAME> for the op's inputs and outputs only (asc-devkit
  cmake/asc/fwk_modules/util/ascendc_impl_build.py, get_dtype_fmt_options): another name in the entry's source is
  undeclared;
* the tiling data is found by the op type (REGISTER_TILING_DATA_CLASS(<Op>, ...) or <Op>_<tiling key>);
* the kernel is built for the compute units the OpDef adds (AICore().AddConfig): none for the presets'
  ASCEND_COMPUTE_UNIT means no kernel for this machine.

The op's inputs and outputs are read from op_host's ``this->Input("...")`` / ``Output`` chains, in order, as
opbuild's op info lists them. Nothing is compiled.

    fake_compile_kernel.py OP_KERNEL_DIR OP_HOST_DIR COMPUTE_UNIT OP...
"""
import os
import re
import sys

import tbe  # noqa: F401  (CANN's Python package: fails under a Python without CANN's requirements)

WRAPPER = "asc-devkit ascendc_compile_gen_code.py, gen_usr_origin_kernel_function_call"


def fail(message):
    print(f"[ERROR] {message}", file=sys.stderr)
    sys.exit(1)


def no_comments(text):
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)


def snake_of(op):
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", op)).lower()


def op_info(host_dir, op):
    """(inputs, outputs, AddConfig units, tiling registrations) of ``op`` from the op_host sources."""
    text = ""
    for name in sorted(os.listdir(host_dir)):
        if name.endswith((".cpp", ".cc", ".h", ".hpp")):
            with open(os.path.join(host_dir, name), errors="replace") as f:
                text += no_comments(f.read()) + "\n"
    start = re.search(rf"\bclass\s+{op}\s*:", text)
    end = re.search(rf"\bOP_ADD\s*\(\s*{op}\s*\)", text)
    body = text[start.end() if start else 0:end.start() if end else len(text)]
    inputs, outputs = [], []
    for kind, name in re.findall(r"\b(Input|Output)\s*\(\s*\"([^\"]+)\"\s*\)", body):
        group = inputs if kind == "Input" else outputs
        if name not in group:
            group.append(name)
    units = [u.lower() for u in re.findall(r"AddConfig\s*\(\s*\"([^\"]+)\"", body)]
    tilings = re.findall(r"\bREGISTER_TILING_DATA_CLASS\s*\(\s*(\w+)", text)
    return inputs, outputs, units, tilings, "OutputShapeDependOnCompute" in body


def entry_params(source, snake):
    m = re.search(rf"(?<!\w)void\s+{snake}\s*\(", source)
    if not m:
        return None
    depth, i = 1, m.end()
    while i < len(source) and depth:
        depth += source[i] == "("
        depth -= source[i] == ")"
        i += 1
    inside = source[m.end():i - 1]
    params, depth, cur = [], 0, ""
    for ch in inside:
        depth += ch in "(<[{"
        depth -= ch in ")>]}"
        if ch == "," and depth == 0:
            params.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip() and cur.strip() != "void":
        params.append(cur.strip())
    return params


kernel_dir, host_dir, unit, ops = sys.argv[1], sys.argv[2], sys.argv[3].lower(), sys.argv[4:]
if not ops:
    fail("no op registered (OP_ADD) in op_host/: nothing to compile")
for op in ops:
    snake = snake_of(op)
    src = os.path.join(kernel_dir, snake + ".cpp")
    if not os.path.isfile(src):
        fail(f"{src}: No such file or directory (the kernel of op {op})")
    with open(src, errors="replace") as f:
        source = no_comments(f.read())
    inputs, outputs, units, tilings, shape_out = op_info(host_dir, op)
    if units and unit and not set(unit.split(";")) & set(units):
        fail(f"op {op} adds no AICore config for {unit} (AddConfig: {', '.join(units)}): no kernel is built for it")
    if not any(t == op or re.fullmatch(rf"{op}_\d+", t) for t in tilings):
        fail(f"no tiling data registered for op type {op} (REGISTER_TILING_DATA_CLASS: {', '.join(tilings) or 'none'})")
    params = entry_params(source, snake)
    if params is None:
        fail(f"{src}: no kernel entry {snake}(...)")
    want = [*inputs, *outputs, "workspace", "tiling"]
    for p in params:
        if "GM_ADDR" not in p and "__gm__" not in p:
            fail(f"{src}: cannot initialize a parameter of type '{p}' with an lvalue of type 'GM_ADDR' in the "
                 f"generated call {snake}({', '.join(want)}) ({WRAPPER})")
    if len(params) != len(want) and not (shape_out and len(params) == len(want) + 1):
        fail(f"{src}: no matching function for call to '{snake}': the generated call passes {len(want)} arguments "
             f"({', '.join(want)}), the entry takes {len(params)} ({WRAPPER})")
    names = [p.split()[-1].lstrip("*&") for p in params[:len(inputs) + len(outputs)]]
    ios = [*inputs, *outputs]
    if len(set(ios)) == len(ios) and sorted(names) == sorted(ios) and names != ios:
        # it builds: the real toolchain says nothing and the kernel reads its inputs in the wrong places
        fail(f"{src}: the entry's parameters {', '.join(names)} are bound by position to {', '.join(ios)} "
             f"(the stand-in refuses what CANN would build and run wrongly; {WRAPPER})")
    known = {n.upper() for n in ios} | {f"{n.upper()}_REF" for n in outputs if n in inputs}
    own = set(re.findall(r"#\s*define\s+(?:ORIG_)?DTYPE_(\w+)", source))
    for line in source.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for name in re.findall(r"\b(?:ORIG_)?DTYPE_(\w+)", line):
            if name not in known and name not in own:
                fail(f"{src}: use of undeclared identifier 'DTYPE_{name}' (the compile defines DTYPE_<NAME> for "
                     f"{', '.join(sorted(known))})")
    print(f"[INFO] kernel of {op}: {src} for {unit or 'the default compute unit'}")
