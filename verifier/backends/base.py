"""The verifier backend seam: the base class every backend derives from (``Backend``: what it must declare,
and the host's default for every optional hook), its device runtime (``DeviceRuntime``: how the worker drives
the device) included. A new backend is one module here (or a plugin's) plus one seed-knowledge folder under
``core/knowledge/<name>/``.

Every backend keeps the same candidate and runtime contract: kernel sources built into one shared
library whose ``extern "C"`` launchers ``model.py`` calls through ``verifier.runtime``, on device
backends with the current stream filled in.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

from verifier.sandbox.seccomp import CPU_NEEDS, RuntimeNeeds
from verifier.toolchain.cdecl import Signature, parse_extern_c
from verifier.toolchain.linkage import LinkPolicy


@dataclass
class Toolchain:
    """Whether the backend can build and run here, and if not, the one-line reason and its fix.

    ``toolchain_ok`` (compiler/SDK present) and ``device_ok`` (a device to run on) say which half is
    missing; both default to ``available``. ``problems`` lists every reason; ``reason`` joins them."""

    available: bool
    reason: str = ""
    compiler: str = ""
    version: str = ""
    device: str = ""
    details: dict[str, str] = field(default_factory=dict)
    toolchain_ok: bool | None = None
    device_ok: bool | None = None
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)   # what fails for part of the work (a form), with its fix
    notes: list[str] = field(default_factory=list)      # what works, and how where a probe chose it (_Float16's flags)

    def __post_init__(self) -> None:
        if self.toolchain_ok is None:
            self.toolchain_ok = self.available
        if self.device_ok is None:
            self.device_ok = self.available
        if self.reason and not self.problems:
            self.problems = [self.reason]
        if self.problems and not self.reason:
            self.reason = "; ".join(self.problems)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class BuildPlan:
    """How to turn a candidate's sources into one shared library, as commands run in ``workdir``."""

    commands: list[list[str]]
    library: str                      # path of the resulting library, relative to workdir
    files: dict[str, str] = field(default_factory=dict)  # extra generated files (e.g. CMakeLists.txt)
    keep: list[str] = field(default_factory=list)  # folders kept beside the library (a custom op's private vendor)
    min_timeout_s: float = 0.0   # the least time each command gets, whatever the build timeout (a custom op's build)
    readable: list[str] = field(default_factory=list)   # what the commands read besides the sandbox's view (the
    #                                                     toolkit Python's prefix and user site)
    env: dict[str, str] = field(default_factory=dict)   # variables the commands need (PYTHONUSERBASE)


@dataclass(frozen=True)
class KernelRules:
    """The anti-hack rules a device backend adds to the common kernel-source rules
    (``verifier.gates.antihack.kernel``); each is refused with its reason, in words an LLM can act on."""

    words: dict[str, tuple[tuple[str, ...], str]]   # what -> (names banned wherever they appear, why/what to do)
    includes: tuple[tuple[str, str], ...] = ()      # (regex on the included header, why)
    sdk_headers: frozenset[str] = frozenset()       # SDK headers that may be included with quotes
    sdk_patterns: tuple[str, ...] = ()              # regexes of SDK headers that may be included with quotes
    prefixes: tuple[tuple[str, str], ...] = ()      # (regex of banned names, why)
    launch_needs_stream: bool = False               # every <<<...>>> launch must name the launcher's stream


class KernelCallError(TypeError):
    """A launcher was called with arguments that do not match its C declaration, or its launch failed (raised by
    ``verifier.runtime`` and by a device runtime's ``launch_check`` or ``argument`` converters)."""


class DeviceRuntime:
    """How the sandboxed worker and ``verifier.runtime`` drive a backend's device: the device's
    synchronisation, its timing events, its current stream, the cache-flush size, and what a launch
    of the candidate's library needs besides converted arguments. A backend names its class as
    ``device_runtime``; a job carries that class's ``module:Class`` (``runtime_target``), and the worker
    makes one per job. This base class is the host's (the CPU's): nothing to synchronise, no events,
    no stream; the flush is the requested size (twice the CPU's last-level cache).

    Every method imports torch (and a device extension) only when called: the harness reads the class
    declarations without importing either."""

    device: ClassVar[str] = "cpu"              # torch device type of the tensors a launcher takes
    stream_type: ClassVar[str | None] = None   # the C type of the stream parameter the runtime fills in
    entry_prefix: ClassVar[str] = ""           # launch entries named prefix + kernel (callable by the kernel's
                                               # name); a non-void return of one is a status: non-zero fails
    modules: ClassVar[tuple[str, ...]] = ()    # imported before the device is used (torch_npu)
    status_returns: ClassVar[bool] = False     # every integer return of a launcher is a status, not only a launch
                                               # entry's (Ascend's bindings return what aclnn<Op> returned)

    def prepare(self) -> None:
        """Once per job, before any tensor is made (select the device)."""

    def synchronize(self) -> None:
        """Wait for all work on the device (every stream)."""

    def stream_synchronize(self) -> None:
        """Wait for the current stream only: all a caller reading the outputs may rely on."""

    def events(self) -> Callable[[], tuple[Any, Any]] | None:
        """A maker of (start, end) timing events on the current stream, or None (timed by the wall clock)."""
        return None

    def current_stream(self) -> Callable[[], int] | None:
        """A getter of the current stream's handle, read at each launch; None without streams."""
        return None

    def flush_bytes(self, requested: int) -> int:
        """Bytes to overwrite before each timed call; ``requested`` is twice the host's last-level cache."""
        return requested

    def status_failure(self, name: str, status: int) -> str:
        """What launcher ``name`` returning the non-zero status ``status`` means, in words (raised to ``model.py``
        as ``verifier.runtime.KernelCallError``)."""
        return f"{name}() returned {status}: the kernel launch failed"

    def launch_check(self, library: Any) -> Callable[[str], None] | None:
        """A check run after each launch of ``library`` (a ctypes CDLL) that raises on a failed launch."""
        return None

    def argument(self, sig: Signature, index: int, where: str) -> tuple[Any, Callable[[Any], Any]] | None:
        """(ctypes type, converter) for argument ``index`` of ``sig`` when the device treats it specially
        (Ascend's workspace); None for the usual conversion."""
        return None


class TorchDeviceRuntime(DeviceRuntime):
    """A device driven through a torch device module (``torch.cuda``, ``torch.npu``): device-wide and
    current-stream synchronisation and timing events come from the module; a subclass names it and
    its stream handle's attribute."""

    module_name: ClassVar[str] = ""      # "cuda" -> torch.cuda
    stream_handle: ClassVar[str] = ""    # the current stream's attribute holding the raw handle

    def module(self) -> Any:
        import torch

        return getattr(torch, self.module_name)

    def synchronize(self) -> None:
        self.module().synchronize()

    def stream_synchronize(self) -> None:
        self.module().current_stream().synchronize()

    def events(self) -> Callable[[], tuple[Any, Any]]:
        module = self.module()
        return lambda: (module.Event(enable_timing=True), module.Event(enable_timing=True))

    def current_stream(self) -> Callable[[], int]:
        # resolved at each launch: a library may be loaded before the device extension is
        return lambda: int(getattr(self.module().current_stream(), self.stream_handle))


class BuildPlanError(ValueError):
    """The candidate cannot be built as written (a build-gate failure with this message)."""


FORM_KERNEL_LAUNCH = "kernel-launch"
"""The form every backend takes: flat kernel sources with ``extern "C"`` launchers, built into one library."""


class Backend(abc.ABC):
    """A place kernels run: CPU, CUDA GPU or Ascend NPU. A backend derives from this class and declares what is
    its own; everything else has the host's default here, so no caller probes for a hook. Abstract: its name,
    toolchain, build key, build plan and tolerance. A new backend is one module (or a plugin's, see
    ``verifier.backends``) plus one seed-knowledge folder."""

    name: ClassVar[str]
    display_name: ClassVar[str] = ""                  # how prompts name it ("" : its name)
    device: ClassVar[str] = "cpu"                     # torch device type tensors must be on ("cpu", "cuda", "npu")
    source_suffixes: ClassVar[tuple[str, ...]] = (".cpp",)    # kernel sources the build compiles
    header_suffixes: ClassVar[tuple[str, ...]] = (".h", ".hpp")   # sources included by others, not compiled alone
    flags: ClassVar[tuple[str, ...]] = ()             # the compiler's flags (prompts state them; the roofline's probe
    #                                                   builds with the CPU's)
    process_model: ClassVar[str] = "fork"             # "fork": jobs fork from a warm server; "spawn": a fresh
    #                                                   interpreter per job (a device runtime is never forked)
    timer: ClassVar[str] = "wall"                     # "wall" (perf_counter around a synchronised call) or "events"
    kernel_rules: ClassVar[KernelRules | None] = None     # device anti-hack rules on kernel sources (None: the common)
    project_rules: ClassVar[Mapping[str, KernelRules]] = MappingProxyType({})   # per place of a project form
    #                                                   (its first folder, "" for the top level); none by default
    device_runtime: ClassVar[type[DeviceRuntime]] = DeviceRuntime   # how the worker drives the device
    runtime_needs: ClassVar[RuntimeNeeds] = CPU_NEEDS     # what its runtime needs from the seccomp filter and limits
    forms: ClassVar[tuple[str, ...]] = (FORM_KERNEL_LAUNCH,)   # the authoring forms it takes
    extra_files: ClassVar[tuple[str, ...]] = ()       # files a form holds besides sources (a project's op JSON)
    candidate_folders: ClassVar[tuple[str, ...]] = ()     # folders a form keeps sources in (op_host/, op_kernel/)
    call_variables: ClassVar[tuple[str, ...]] = ()    # the only names ``call_env`` may set in a job's environment
    knowledge_dir: ClassVar[str | None] = None        # its seed-knowledge folder (None: core/knowledge/<name>/)

    @property
    def compiler(self) -> str | None:
        """The compiler's path, when one program builds a candidate (the CPU's g++); None otherwise."""
        return None

    @classmethod
    def claims(cls, files: dict[str, str]) -> bool:
        """Whether a folder's files (name -> text) are written for this backend: how ``verifier.runtime.load``
        picks the recipe outside the verifier. The CPU claims what no other backend does (the default)."""
        return False

    @classmethod
    def form_of(cls, files: dict[str, str] | list[str]) -> str:
        """Which of its ``forms`` a candidate's files (names, or name -> text) are written in, recognised by its
        files; ``FORM_KERNEL_LAUNCH`` for files of none of its own."""
        return FORM_KERNEL_LAUNCH

    @classmethod
    def form_prompt(cls, form: str) -> str:
        """What a prompt adds to ask for ``form`` (its files and their layout); "" for the kernel-launch form."""
        return ""

    def layout_problem(self, form: str, files: dict[str, str]) -> str | None:
        """What is wrong with the layout of a candidate in one of its own forms other than kernel-launch (the
        format gate checks the kernel-launch form's flat files itself), one actionable sentence; None when fine."""
        return None

    @classmethod
    def project_problem(cls, files: dict[str, str]) -> str | None:
        """An anti-hack rule across the files of a candidate in a project form (Ascend: the binding calls only its
        own op's API), beyond each place's ``project_rules``; None when it keeps it."""
        return None

    @abc.abstractmethod
    def toolchain(self) -> Toolchain:
        """Discover the compiler/SDK and device; never raises. Cached: call it as often as needed."""

    def build_flags(self) -> tuple[str, ...]:
        """The flags every build uses: ``flags``, and what a probe of this machine adds (the CPU's ``_Float16``)."""
        return self.flags

    @abc.abstractmethod
    def build_key(self) -> str:
        """Everything besides the sources that changes the built library (compiler version, flags, target)."""

    def launchers(self, sources: dict[str, str]) -> list[Signature]:
        """The C functions the runtime may call, read from the kernel sources (name -> text): every ``extern "C"``
        function by default (device backends drop device kernels or turn them into launch entries). Raises
        ``verifier.toolchain.cdecl.DeclarationError`` with an actionable message when there are none."""
        return [sig for text in sources.values() for sig in parse_extern_c(text)]

    def preprocess_argv(self, source: str) -> list[str] | None:
        """The command that writes ``source`` preprocessed to stdout (macros expanded, line markers kept), from which
        launchers a macro generates are read (``verifier.build``); None: the backend reads its sources as written."""
        return None

    @abc.abstractmethod
    def build_plan(self, sources: list[str], workdir: Path) -> BuildPlan:
        """The commands that build ``sources`` (names in ``workdir``) into one shared library. May raise
        ``BuildPlanError`` for a candidate that cannot be built as written."""

    @abc.abstractmethod
    def tolerance(self, dtype: str) -> tuple[float, float]:
        """Default (atol, rtol) for outputs of ``dtype`` ("float32", "float16", ...)."""

    def link_policy(self) -> LinkPolicy:
        """What a built library may link against beyond the system runtimes (``verifier.toolchain.linkage``): by
        default the system runtimes only, and no loader lookups."""
        return LinkPolicy()

    def sandbox_devices(self) -> list[str]:
        """Device nodes the sandboxed worker needs to see (``/dev/nvidia*``...): none on the host."""
        return []

    def worker_env(self) -> dict[str, str]:
        """Environment variables the worker needs from the host (library paths, visible devices): none."""
        return {}

    def call_env(self, library: Path) -> dict[str, str]:
        """What the job that loads and calls ``library`` (in the job's folder, with the build's kept folders
        beside it) needs in its environment besides ``worker_env`` (a custom op's private vendor); only the names
        in ``call_variables`` reach the job. Nothing by default."""
        return {}

    def memory_limit(self) -> bool:
        """Whether an address-space limit (RLIMIT_AS) is safe: on the host yes; device drivers map huge ranges."""
        return True

    def explain(self, text: str) -> str:
        """A one-line meaning of a device error found in ``text`` (a worker's error or stderr), or ""."""
        return ""

    @staticmethod
    def log_tail(job_dir: Path) -> str:
        """The device runtime's own log of the job in ``job_dir`` (its last error lines, labelled), attached to any
        failure of that job; "" where the runtime keeps none (the host's)."""
        return ""
