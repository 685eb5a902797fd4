"""Stand-in for the kernel compile step of the op project (cmake/util/ascendc_compile_kernel.py under the presets'
ASCEND_PYTHON_EXECUTABLE): it imports CANN's Python packages (tbe), which need CANN's Python requirements, and
checks that op_kernel/<snake>.cpp exists for each op type the op_host sources register. Nothing is compiled."""
import os
import re
import sys

import tbe  # noqa: F401  (CANN's Python package: fails under a Python without CANN's requirements)

kernel_dir, ops = sys.argv[1], sys.argv[2:]
if not ops:
    print("[ERROR] no op registered (OP_ADD) in op_host/: nothing to compile", file=sys.stderr)
    sys.exit(1)
for op in ops:
    snake = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", op)).lower()
    src = os.path.join(kernel_dir, snake + ".cpp")
    if not os.path.isfile(src):
        print(f"[ERROR] {src}: No such file or directory (the kernel of op {op})", file=sys.stderr)
        sys.exit(1)
    print(f"[INFO] kernel of {op}: {src}")
