"""The verifier: gates, backends, the sandboxed worker and timing. It knows nothing of memory or LLMs: input = a
task and a candidate's files, output = an ``Outcome`` record.

This is its face: everything the engine (``core``) uses of the verifier is named here, and core imports nothing
else of it (an import-linter contract, ``pyproject.toml``). By room:

* the bottom layer, plain records and rules that start no process (imported with this package): the outcome
  (``Outcome``, ``GateResult``, ``GATES``), the speed verdict's one rule and its words (``verifier.verdict``:
  ``judge_ratio``, ``speed_words``...), the tolerance, the task and its cases, the settings, the errors;
* everything above it, imported on first use (``__getattr__``): the verifier itself and its protocol
  (``Verifier`` imports PyTorch and the sandbox), the cluster, the backend table, a candidate as files, the
  anti-hack rules' text, this machine's facts and roofline, the sandbox's layers, the sizing probes.

A name said differently here than in its module says what it is without the module's name around it
(``verifier.verdict.words`` is ``speed_words``, ``verifier.machine.roofline.assess`` is ``assess_roofline``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from verifier.cases import (
    FLOAT_DTYPES,
    CaseError,
    canonical_dtype,
    case_dtypes,
    case_file_name,
    case_number,
    describe_case,
    describe_groups,
    entry_shapes,
    numbered_entry,
    parse_case_file,
    tensor_dtypes,
    timing_order,
    untimed_dtypes,
)
from verifier.config import VerifyConfig, default_threads
from verifier.errors import ReferenceFailed, SandboxError, ToolchainMissing, UnknownBackend, VerifierError
from verifier.locations import cache_dir, crash_dir
from verifier.npu_source import NpuOnly, neutralise_npu, torch_npu_available
from verifier.outcome import GATES, GateResult, Outcome
from verifier.task import MIN_SIZE, TaskSpec, load_task_module, module_constants, size_constants
from verifier.tolerance import Tolerance, tolerance_for
from verifier.verdict import FASTER, JUDGED, NOISE_LIMIT, SAME, UNJUDGED, Ratio, Verdict, judge_unpaired
from verifier.verdict import judge as judge_ratio
from verifier.verdict import legend as speed_legend
from verifier.verdict import note as speed_note
from verifier.verdict import reason as speed_reason
from verifier.verdict import word as speed_word
from verifier.verdict import words as speed_words

if TYPE_CHECKING:
    from verifier.backends import (
        backend_device,
        backend_names,
        declared_suffixes,
        display_name,
        form_prompt,
        get_backend,
        knowledge_folder,
        source_suffix,
    )
    from verifier.build import build_candidate, disassemble
    from verifier.candidate_files import candidate_hash, candidate_identity, candidate_paths, name_problem
    from verifier.gates.antihack.rules import contract_text
    from verifier.harness.cluster import ClusterVerifier, describe_cluster
    from verifier.harness.device_check import confined_device_op
    from verifier.harness.outcome_cache import recorded as recorded_outcome
    from verifier.harness.protocol import VerificationCancelled, VerifierProtocol
    from verifier.harness.verify import Verifier
    from verifier.machine.caches import FLUSH_SHARED_SHARE, human_bytes
    from verifier.machine.counters import CallCounts
    from verifier.machine.facts import fingerprint as machine_fingerprint
    from verifier.machine.facts import machine_facts
    from verifier.machine.roofline import RooflineMeter
    from verifier.machine.roofline import assess as assess_roofline
    from verifier.machine.roofline import describe_cases as describe_roofline_cases
    from verifier.machine.roofline import describe_profile as describe_roofline_profile
    from verifier.priority import end_started_by
    from verifier.sandbox import bwrap_status, landlock_status, seccomp_status
    from verifier.scratch import process_alive
    from verifier.scratch import remove_all as remove_scratch
    from verifier.sizing.case_limits import fit_cases
    from verifier.sizing.launch import ProbeSandbox, run_probe
    from verifier.sizing.limits import BYTES_CAP as SIZING_BYTES_CAP
    from verifier.sizing.limits import PROBE_TIMEOUT_S
    from verifier.sizing.limits import WINDOW_MS as SIZING_WINDOW_MS
    from verifier.sizing.record import Probe
    from verifier.sizing.scaling import fixed_divisors, scale_cases, scale_values
    from verifier.toolchain.cdecl import POINTER_DTYPES
    from verifier.toolchain.linkage import link_check_status

# name -> (module, its name there): the names above the bottom layer, imported on first use. The TYPE_CHECKING
# imports above say the same for the type checker (tests/verification/test_face.py holds the two to each other).
_LAZY: dict[str, tuple[str, str]] = {
    # the verifier, its protocol, the cluster
    "Verifier": ("verifier.harness.verify", "Verifier"),
    "VerifierProtocol": ("verifier.harness.protocol", "VerifierProtocol"),
    "VerificationCancelled": ("verifier.harness.protocol", "VerificationCancelled"),
    "ClusterVerifier": ("verifier.harness.cluster", "ClusterVerifier"),
    "describe_cluster": ("verifier.harness.cluster", "describe_cluster"),
    "confined_device_op": ("verifier.harness.device_check", "confined_device_op"),
    "recorded_outcome": ("verifier.harness.outcome_cache", "recorded"),
    # the backend table
    "backend_device": ("verifier.backends", "backend_device"),
    "backend_names": ("verifier.backends", "backend_names"),
    "declared_suffixes": ("verifier.backends", "declared_suffixes"),
    "display_name": ("verifier.backends", "display_name"),
    "form_prompt": ("verifier.backends", "form_prompt"),
    "get_backend": ("verifier.backends", "get_backend"),
    "knowledge_folder": ("verifier.backends", "knowledge_folder"),
    "source_suffix": ("verifier.backends", "source_suffix"),
    # a candidate built and read (a look inside: its hot loops' assembly)
    "build_candidate": ("verifier.build", "build_candidate"),
    "disassemble": ("verifier.build", "disassemble"),
    # a candidate as files; the anti-hack rules a prompt states
    "candidate_hash": ("verifier.candidate_files", "candidate_hash"),
    "candidate_identity": ("verifier.candidate_files", "candidate_identity"),
    "candidate_paths": ("verifier.candidate_files", "candidate_paths"),
    "name_problem": ("verifier.candidate_files", "name_problem"),
    "contract_text": ("verifier.gates.antihack.rules", "contract_text"),
    # this machine: facts, caches, roofline; the processes this tool started; the sandbox's layers
    "FLUSH_SHARED_SHARE": ("verifier.machine.caches", "FLUSH_SHARED_SHARE"),
    "human_bytes": ("verifier.machine.caches", "human_bytes"),
    "CallCounts": ("verifier.machine.counters", "CallCounts"),
    "process_alive": ("verifier.scratch", "process_alive"),
    "remove_scratch": ("verifier.scratch", "remove_all"),
    "machine_fingerprint": ("verifier.machine.facts", "fingerprint"),
    "machine_facts": ("verifier.machine.facts", "machine_facts"),
    "RooflineMeter": ("verifier.machine.roofline", "RooflineMeter"),
    "assess_roofline": ("verifier.machine.roofline", "assess"),
    "describe_roofline_cases": ("verifier.machine.roofline", "describe_cases"),
    "describe_roofline_profile": ("verifier.machine.roofline", "describe_profile"),
    "end_started_by": ("verifier.priority", "end_started_by"),
    "bwrap_status": ("verifier.sandbox", "bwrap_status"),
    "landlock_status": ("verifier.sandbox", "landlock_status"),
    "seccomp_status": ("verifier.sandbox", "seccomp_status"),
    "POINTER_DTYPES": ("verifier.toolchain.cdecl", "POINTER_DTYPES"),
    "link_check_status": ("verifier.toolchain.linkage", "link_check_status"),
    # sizing a task by work
    "fit_cases": ("verifier.sizing.case_limits", "fit_cases"),
    "ProbeSandbox": ("verifier.sizing.launch", "ProbeSandbox"),
    "run_probe": ("verifier.sizing.launch", "run_probe"),
    "SIZING_BYTES_CAP": ("verifier.sizing.limits", "BYTES_CAP"),
    "PROBE_TIMEOUT_S": ("verifier.sizing.limits", "PROBE_TIMEOUT_S"),
    "SIZING_WINDOW_MS": ("verifier.sizing.limits", "WINDOW_MS"),
    "Probe": ("verifier.sizing.record", "Probe"),
    "fixed_divisors": ("verifier.sizing.scaling", "fixed_divisors"),
    "scale_cases": ("verifier.sizing.scaling", "scale_cases"),
    "scale_values": ("verifier.sizing.scaling", "scale_values"),
}

__all__ = [
    # the bottom layer
    "cache_dir", "canonical_dtype", "case_dtypes", "case_file_name", "case_number", "CaseError", "crash_dir",
    "default_threads", "describe_case", "describe_groups", "entry_shapes", "FASTER", "FLOAT_DTYPES", "GateResult",
    "GATES", "judge_ratio", "judge_unpaired", "JUDGED", "load_task_module", "MIN_SIZE", "module_constants",
    "neutralise_npu", "NOISE_LIMIT", "NpuOnly", "numbered_entry", "Outcome", "parse_case_file", "Ratio",
    "ReferenceFailed", "SAME", "SandboxError", "size_constants", "speed_legend", "speed_note", "speed_reason",
    "speed_word", "speed_words", "TaskSpec", "tensor_dtypes", "timing_order", "Tolerance", "tolerance_for",
    "ToolchainMissing", "torch_npu_available", "UNJUDGED", "UnknownBackend", "untimed_dtypes", "Verdict",
    "VerifierError", "VerifyConfig",
    # above it, on first use (_LAZY)
    "assess_roofline", "backend_device", "backend_names", "build_candidate", "bwrap_status", "CallCounts",
    "candidate_hash", "candidate_identity", "candidate_paths", "ClusterVerifier", "confined_device_op",
    "contract_text", "declared_suffixes", "describe_cluster", "describe_roofline_cases",
    "describe_roofline_profile", "disassemble", "display_name", "end_started_by", "fit_cases", "fixed_divisors",
    "FLUSH_SHARED_SHARE", "form_prompt", "get_backend", "human_bytes", "knowledge_folder", "landlock_status",
    "link_check_status", "machine_facts", "machine_fingerprint", "name_problem", "POINTER_DTYPES", "Probe",
    "PROBE_TIMEOUT_S", "ProbeSandbox", "process_alive", "recorded_outcome", "remove_scratch", "RooflineMeter",
    "run_probe", "scale_cases", "scale_values", "seccomp_status", "SIZING_BYTES_CAP", "SIZING_WINDOW_MS",
    "source_suffix", "VerificationCancelled", "Verifier", "VerifierProtocol",
]


def __getattr__(name: str) -> Any:
    found = _LAZY.get(name)
    if found is None:
        raise AttributeError(f"module 'verifier' has no attribute {name!r}")
    module, attribute = found
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value   # once: the next lookup finds it without this function
    return value
