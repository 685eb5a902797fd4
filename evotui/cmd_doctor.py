"""``evokernel doctor [--json] [--backend NAME]``: what can run here.

For every backend (cpu, cuda, ascend): is its toolchain present (compiler, SDK, version), is there a
device, and if not, the exact reason with its fix; with a device, one device op in a candidate's confined job
(``verifier.harness.device_check``). Then how candidates are isolated (bubblewrap,
seccomp). Device runtimes are probed in subprocesses, never imported here. Always exits 0: a missing
toolchain is a finding, not an error.
"""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("doctor", help="which backends can build and run here, and why not")
    p.add_argument("--backend", default=None, help="check only this backend (cpu, cuda or ascend)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--remeasure", action="store_true",
                   help="measure the roofline ceilings again (the best of all measurements is kept)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from core.doctor import backend_names, diagnose

    if args.backend is not None and args.backend not in backend_names():
        print(f"evokernel: unknown backend {args.backend!r}; choose one of: {', '.join(backend_names())}",
              file=sys.stderr)
        return 2
    data = diagnose([args.backend] if args.backend else None, remeasure=args.remeasure)
    if args.json:
        print(json.dumps(data, indent=1))
        return 0
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    table = Table(box=None, show_header=True, header_style="bold")
    table.add_column("backend")
    table.add_column("status")
    table.add_column("toolchain", overflow="fold")
    table.add_column("device", overflow="fold")
    for name, b in data["backends"].items():
        tool = b["toolchain"]
        dev = b["device"]
        tool_text = (("[green]✓[/] " if tool["present"] else "[red]✗[/] ")
                     + escape(tool.get("version") or tool.get("compiler") or ""))
        dev_text = ("[green]✓[/] " if dev["present"] else "[red]✗[/] ") + escape(dev.get("name") or "")
        table.add_row(name, "[green]ready[/]" if b["available"] else "[red]unavailable[/]", tool_text, dev_text)
    console.print(table)
    for name, b in data["backends"].items():
        for problem in b["problems"]:
            console.print(f"[red]✗[/] {name}: {escape(problem)}")
        for warning in b.get("warnings", []):
            console.print(f"[yellow]![/] {name}: {escape(warning)}")
        for note in b.get("notes", []):   # what works, and the flags a probe chose for it
            console.print(f"[green]✓[/] {name}: {escape(note)}")
        confined = b.get("confined_device_op")
        if confined and confined.get("ok"):   # a failure is among the problems above
            console.print(f"[green]✓[/] {name}: {escape(confined['detail'])}")
    machine = data.get("machine")
    if machine:  # #12: this machine's roofline ceilings (core.doctor.machine_report)
        c = machine.get("ceilings")
        ceil = (f"ceilings ({machine['threads']} threads): memory {c['triad_gbps']:.1f} GB/s (STREAM triad), "
                f"compute {c['fma_gflops']:.1f} GFLOP/s fp32 (FMA), best of {c.get('measurements', 1)} measurement(s)"
                f"{'; cached' if machine.get('ceilings_cached') and not args.remeasure else ''}"
                if c else f"ceilings not measured: {machine.get('problem')}")
        console.print(f"{'[green]✓[/]' if c else '[yellow]![/]'} {escape(ceil)}")
        if machine.get("isa"):
            cpu = (f"cpu: {machine['cpu']}, -march=native = {machine.get('arch') or '?'}: "
                   f"{' '.join(machine['isa'])}; {machine.get('caches_text', '')}")
            console.print(f"[dim]{escape(cpu)}[/]")
        for refused in machine.get("isa_refused") or []:   # enabled by -march=native, but a program using it failed
            console.print(f"[yellow]![/] {escape(f'-march=native enables {refused}: kernels must not use it')}")
        if machine.get("flush_text"):
            console.print(f"[dim]{escape('cache flush before each timed call: ' + machine['flush_text'])}[/]")
    for entry in data["sandbox"].values():
        mark = "[green]✓[/]" if entry["available"] else "[yellow]![/]"
        console.print(f"{mark} {escape(entry['detail'])}")
    versions = f"python {data['python']}, torch {data['torch'] or 'not installed'}"
    versions += (f", torch_npu {data['torch_npu']}" if data["torch_npu"]
                 else ", torch_npu not installed (pip install 'evokernel[npu]')")
    console.print(f"[dim]{escape(versions)}[/]")
    return 0
