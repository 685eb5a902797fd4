"""The names the ``model.py`` rules know: what may be imported, which torch names allocate, which compute,
which attributes reach outside the candidate. Read by ``verifier.gates.antihack.model``."""

from __future__ import annotations

import re

# Modules model.py may import (``verifier.runtime`` only as ``from verifier.runtime import load``).
ALLOWED_IMPORTS = {"torch", "torch.nn", "math", "typing", "numbers", "verifier.runtime", "__future__"}
MODULES = {"torch", "torch.nn", "torch.nn.init", "math", "typing", "numbers", "__future__"}
IMPORT_HINTS = {
    "torch.nn.functional": "nn.functional computes what your kernel must compute",
    "torch.utils.cpp_extension": "build through the candidate's sources and verifier.runtime.load(), not cpp_extension",
    "ctypes": "call kernels through verifier.runtime.load(), which checks arguments",
    "numpy": "numpy would compute outside the kernel",
}
DO_INSTEAD = "compute in your kernel; model.py may only allocate outputs and call lib functions"
# torch.<name>(...) calls allowed outside __init__: allocation and shape helpers.
TORCH_ALLOCATION = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
                    "full_like", "Size", "no_grad", "inference_mode", "device", "dtype", "is_tensor",
                    "is_floating_point"}
TORCH_HELPERS = {"finfo", "iinfo"}
# torch.<name> that may be used as a value (not only called): dtypes, types, layouts, constants.
TORCH_VALUES = set("""float32 float float64 double float16 half bfloat16 int8 int16 short int32 int int64 long
uint8 uint16 uint32 uint64 bool complex64 complex128 cfloat cdouble chalf float8_e4m3fn float8_e5m2
float8_e4m3fnuz float8_e5m2fnuz Tensor Size device dtype layout strided memory_format contiguous_format
channels_last channels_last_3d preserve_format inf nan pi e finfo iinfo""".split()) | TORCH_ALLOCATION
# torch.<name> that no part of model.py may touch.
TORCH_FORBIDDEN = {"set_num_threads", "set_num_interop_threads", "backends", "set_flush_denormal", "manual_seed",
                   "seed", "use_deterministic_algorithms", "compile", "jit", "ops", "_C", "library", "utils", "hub",
                   "load", "save", "classes", "overrides", "_dynamo", "fx", "autograd", "set_default_dtype",
                   "set_default_device", "cuda", "npu", "random", "multiprocessing", "distributed", "_ops", "_refs",
                   "_prims", "_decomp", "func", "vmap"}
# Tensor methods that compute (outside __init__ these hand the work back to PyTorch).
TENSOR_COMPUTE = set("""abs abs_ absolute acos add add_ addbmm addcdiv addcmul addmm addmv addr all amax amin aminmax
any argmax argmin argsort asin atan atan2 baddbmm bmm ceil clamp clamp_ clamp_max clamp_min clip cos cosh
cross cummax cummin cumprod cumsum diff digamma dist div div_ divide dot eq erf erfc erfinv exp exp_ exp2
expm1 floor floor_divide fmax fmin fmod frac gather ge gelu greater gt hardtanh heaviside hypot index_add
index_select inner kthvalue le lerp lgamma log log10 log1p log2 log_softmax logaddexp logcumsumexp
logical_and logical_not logical_or logit logsumexp lt masked_fill masked_scatter masked_select matmul max
maximum mean median min minimum mm mode msort mul mul_ multiply mv nan_to_num nanmean nanmedian nansum ne
neg negative norm outer pow pow_ prod reciprocal relu relu_ remainder renorm roll round rsqrt scatter
scatter_add scatter_reduce sigmoid sigmoid_ sign sin sinh softmax sort sqrt sqrt_ square std sub sub_
subtract sum tan tanh tanh_ tensordot topk trace tril triu true_divide trunc unique var where xlogy flip
fliplr flipud rot90 conv1d conv2d conv3d softplus silu elu selu mish hardswish hardsigmoid leaky_relu
prelu rrelu celu glu logical_xor bitwise_and bitwise_or bitwise_xor count_nonzero bincount histc cov
corrcoef einsum kron cdist apply_ map_ map2_ item""".split())
# Attributes that hand a tensor's data to NumPy/Python or to raw memory: nowhere in model.py.
DATA_ESCAPES = {"numpy": "x.numpy() hands the tensor to NumPy", "tolist": "x.tolist() computes in Python",
                "__array__": "__array__ hands the tensor to NumPy", "__array_interface__": "__array_interface__ hands "
                "the tensor to NumPy", "__array_struct__": "__array_struct__ hands the tensor to NumPy",
                "__cuda_array_interface__": "__cuda_array_interface__ hands the tensor to another library",
                "__dlpack__": "__dlpack__ hands the tensor to another library",
                "untyped_storage": "storage access is not allowed", "storage": "storage access is not allowed"}
BANNED_NAMES = {"Model": "do not use the reference Model: write ModelNew on your own kernels",
                "eval": "eval is not allowed", "exec": "exec is not allowed", "compile": "compile is not allowed",
                "__import__": "dynamic imports are not allowed", "open": "model.py may not open files",
                "globals": "globals() is not allowed", "locals": "locals() is not allowed",
                "vars": "vars() is not allowed", "setattr": "setattr is not allowed (no patching): assign "
                "attributes directly (self.name = value)", "delattr": "delattr is not allowed",
                "getattr": "getattr is not allowed: write the attribute directly (obj.name)",
                "type": "type() is not allowed in model.py", "breakpoint": "breakpoint is not allowed",
                "input": "input is not allowed", "exit": "exit is not allowed", "quit": "quit is not allowed",
                "__builtins__": "__builtins__ is not allowed", "memoryview": "memoryview is not allowed",
                "F": None}
BANNED_ATTRS = {"__class__", "__dict__", "__globals__", "__code__", "__subclasses__", "__bases__", "__mro__",
                "__builtins__", "__getattribute__", "__setattr__", "__closure__", "__func__", "__self__",
                "__module__", "__wrapped__", "__defaults__", "__kwdefaults__", "__reduce__", "__reduce_ex__",
                "__loader__", "__spec__", "__import__", "__call__", "__torch_function__", "__torch_dispatch__",
                "data_ptr", "_cfunc", "_dll", "functional"}
# Attribute names that are (or lead to) modules: never an attribute in model.py.
MODULE_ATTRS = {"os", "sys", "builtins", "importlib", "ctypes", "subprocess", "socket", "threading",
                "multiprocessing", "signal", "inspect", "gc", "types", "shutil", "pathlib", "pickle", "marshal",
                "runpy", "functools", "operator", "numpy", "np", "torch", "weakref", "copyreg", "contextlib",
                "warnings", "traceback", "linecache", "tempfile", "fcntl", "mmap", "resource", "platform",
                "sysconfig", "site", "atexit", "time", "datetime", "random", "verifier", "runtime", "cpp_extension",
                "utils", "modules", "library"}
ALLOWED_DUNDER_NAMES = {"__name__"}
# nn.Module internals: a candidate may not override them through its own private names.
MODULE_INTERNALS = set("""_apply _backward_hooks _backward_pre_hooks _buffers _call_impl _compiled_call_impl
_forward_hooks _forward_hooks_always_called _forward_hooks_with_kwargs _forward_pre_hooks
_forward_pre_hooks_with_kwargs _get_backward_hooks _get_backward_pre_hooks _get_name _is_full_backward_hook
_load_from_state_dict _load_state_dict_post_hooks _load_state_dict_pre_hooks _maybe_warn_non_full_backward_hook
_modules _named_members _non_persistent_buffers_set _parameters _register_load_state_dict_pre_hook
_register_state_dict_hook _replicate_for_data_parallel _save_to_state_dict _slow_forward _state_dict_hooks
_state_dict_pre_hooks _version _wrapped_call_impl""".split())
INTERNAL_LIKE = re.compile(r"hook|_impl$|state_dict|^_apply$|^_(?:modules|parameters|buffers)$")
# nn classes that hold data rather than compute: their objects may be used in forward.
NN_DATA = {"Parameter", "ParameterList", "ParameterDict", "Buffer", "UninitializedParameter",
            "UninitializedBuffer"}
