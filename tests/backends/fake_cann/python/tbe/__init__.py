"""Stand-in for CANN's tbe package: on import it needs what CANN's Python packages need (the CANN installation
guide's Python requirements: numpy < 2 on Python < 3.13, decorator, sympy, cffi, protobuf, attrs, scipy, psutil).
A Python without them fails here as the real kernel build does."""
import importlib
import sys

for name in ("numpy", "decorator", "sympy", "cffi", "google.protobuf", "attr", "scipy", "psutil"):
    importlib.import_module(name)
import numpy  # noqa: E402

if sys.version_info < (3, 13) and int(numpy.__version__.split(".")[0]) >= 2:
    raise ImportError(f"numpy {numpy.__version__}: CANN's Python packages need numpy < 2 on Python < 3.13")
