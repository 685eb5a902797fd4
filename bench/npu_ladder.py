"""One rung of ``bench/npu_check.py``'s ladder: a process that adds the sandbox's layers up to its rung, in the order
the ladder climbs them, then runs the device checks a candidate's job depends on, and writes ``result.json`` in its
folder. The parent (``npu_check.ladder``) starts one per rung, under bubblewrap from the rung that adds it, so the
first rung whose checks fail names the layer that broke the device (issue #50: root's jobs, with no capability,
could not open the device nodes, and nothing said which layer it was).

    python bench/npu_ladder.py CONFIG_JSON

Layers, in order (``LAYERS``): the job's resource limits; a user and PID namespace of its own; every capability
dropped; Landlock (reads on the sandbox's allow-list, writes in the folder and on the device nodes); bubblewrap
(the parent's wrapper); the seccomp filter the backend's runtime is allowed, after the trusted imports (torch, the
device extension), on every thread, as a spawned job installs it. Checks, in order: each device node opened
read-write; the device runtime's set-up (``set_device``) and one ``torch.ones(1) + 1`` on the device; the example
kernel (``core/knowledge/ascend/example_add.md``, built by the parent) called once and compared."""

from __future__ import annotations

import importlib
import json
import os
import resource
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LAYERS = ("rlimits", "user and PID namespace", "capability drop", "Landlock", "bubblewrap", "seccomp")
CHECKS = ("device nodes opened", "set_device and torch.ones(1) + 1", "the example kernel")


def _status() -> dict[str, str]:
    with open("/proc/self/status") as f:
        return dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)


def _limits(config: dict) -> None:
    """The limits a candidate's job gets (``verifier.sandbox.client.JobLimits``, sent by the parent: importing the
    client here would start threads, and a user namespace is made only by a single-threaded process): CPU time, file
    size, open files (the runtime's declared need), tasks, no core dumps; no address-space limit on a device."""
    limits = {resource.RLIMIT_CORE: 0, resource.RLIMIT_CPU: int(config.get("cpu_seconds", 600)),
              resource.RLIMIT_FSIZE: 256 << 20, resource.RLIMIT_NOFILE: int(config.get("open_files", 1024)),
              resource.RLIMIT_NPROC: int(config.get("tasks", 1024))}
    for which, value in limits.items():
        soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))


def _namespaces() -> None:
    """A user and PID namespace of its own (``verifier.sandbox.lockdown.new_pid_namespace``); the checks run in the
    namespace's first child, as a job does, and this process passes its exit code on."""
    from verifier.sandbox.lockdown import new_pid_namespace

    problem = new_pid_namespace()
    if problem:
        raise OSError(problem)
    pid = os.fork()
    if pid:
        _, status = os.waitpid(pid, 0)
        os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 70)


def apply_layers(config: dict, job: Path) -> list[str]:
    """The layers of this rung but bubblewrap (the parent's) and seccomp (after the trusted imports); the applied."""
    from verifier.sandbox.lockdown import confine_job, drop_capabilities, harden_process

    layers = config["layers"]
    done = []
    harden_process()
    if "rlimits" in layers:
        _limits(config)
        done.append("rlimits")
    if "user and PID namespace" in layers:
        _namespaces()
        done.append("user and PID namespace")
    if "capability drop" in layers:
        drop_capabilities()
        done.append("capability drop")
    if "Landlock" in layers:
        problem = confine_job(str(job), list(config.get("devices", [])), config.get("readable"))
        if problem:
            raise OSError(f"Landlock: {problem}")
        done.append("Landlock")
    return done


def run_checks(config: dict, job: Path, out: dict) -> None:
    """The checks, in order; each one's outcome in ``out["checks"]``; the first failure ends the run."""
    checks: list[dict] = out.setdefault("checks", [])
    try:
        for dev in config.get("devices", []):
            os.close(os.open(dev, os.O_RDWR))
        checks.append({"check": CHECKS[0], "ok": True, "detail": f"{len(config.get('devices', []))} node(s)"})
    except OSError as exc:
        checks.append({"check": CHECKS[0], "ok": False, "detail": f"{exc}"})
        return
    import torch

    from verifier.backends import load_runtime

    runtime = load_runtime(config.get("runtime", ""))
    for name in runtime.modules:           # the trusted imports, before the filter (torch_npu)
        importlib.import_module(name)
    if "seccomp" in config["layers"]:
        from verifier.sandbox.seccomp import RuntimeNeeds, lock_down

        problem = lock_down(os.getpid(), RuntimeNeeds.from_dict(config.get("needs")), all_threads=True)
        if problem:
            raise OSError(f"seccomp: {problem}")
        out["applied"].append("seccomp")
    try:
        runtime.prepare()
        value = torch.ones(1, device=runtime.device) + 1
        runtime.synchronize()
        got = float(value.cpu()[0])
        checks.append({"check": CHECKS[1], "ok": got == 2.0, "detail": f"gave {got}"})
    except Exception as exc:
        checks.append({"check": CHECKS[1], "ok": False, "detail": f"{type(exc).__name__}: {exc}"[:1500]})
        return
    if not config.get("library"):
        checks.append({"check": CHECKS[2], "ok": None, "detail": "not built (no kernel toolchain here)"})
        return
    try:
        from verifier.runtime import KernelLibrary

        lib = KernelLibrary(config["library"], config["signatures"], runtime)
        n = 4096 + 17                        # the example takes any length: the ragged tail is its own case
        x, y = torch.randn(n, device=runtime.device), torch.randn(n, device=runtime.device)
        z = torch.empty_like(x)
        lib.add(8, x, y, z, n)
        runtime.synchronize()
        err = float((z.cpu() - (x.cpu() + y.cpu())).abs().max())
        checks.append({"check": CHECKS[2], "ok": err < 1e-5, "detail": f"max error {err:.3g}"})
    except Exception as exc:
        checks.append({"check": CHECKS[2], "ok": False, "detail": f"{type(exc).__name__}: {exc}"[:1500]})


def main(argv: list[str]) -> int:
    config = json.loads(argv[0])
    job = Path(config["job"])
    fd = os.open(job / "result.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)   # before Landlock, seccomp
    out: dict = {"rung": config["rung"], "layers": config["layers"], "applied": [], "checks": []}
    try:
        out["applied"] = apply_layers(config, job)
        status = _status()
        out.update(euid=os.geteuid(), groups=sorted(os.getgroups()), cap_eff=status.get("CapEff", "").strip(),
                   no_new_privs=status.get("NoNewPrivs", "").strip())
        run_checks(config, job, out)
    except Exception as exc:   # a layer that could not be applied is this rung's finding, not a crash
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()[-2000:]
    out["seccomp"] = _status().get("Seccomp", "").strip()
    os.write(fd, json.dumps(out).encode())
    os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
