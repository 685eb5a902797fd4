"""Sizing a task by work: scale every size it has so its reference takes a target time here.

GPU-sized suites (KernelBench's 19_ReLU is 6.4 GB) must shrink for a CPU, and tiny tasks should grow
until launch overhead stops dominating. Counting input elements misses the work (a GEMM's 32000x32000
weight is a parameter, not an input; a conv's work grows with the cube of its sizes), so ``auto`` runs
the reference and measures: each task is probed in a job of its own under a time and memory cap, which
first shrinks it on the meta device until its tensors fit the memory cap (a parameter never allocated at
full size), then sizes it by its counted work and confirms by timing until one call lands in the window.
A task that cannot be brought into the window is reported with the reason, never timed for minutes.

The modules, in the order a probe uses them:

* ``limits``: the window, the memory caps, the time limits, the nominal rates, the search's budgets.
* ``scaling``: a task's sizes and case extents scaled by a factor, their constraints kept.
* ``case_limits``: a multi-case task's cases within their memory budget and time limit per case.
* ``work``: the work model (tensor bytes on the meta device, counted work as nominal milliseconds).
* ``measure``: the reference timed at given sizes, its operators traced.
* ``search``: the search over scale factors, step by step; ``driver``: ``probe()``, the steps in order.
* ``record``: the progress lines and the record of what a probe found (``Probe``).
* ``job_entry``: what runs inside the probe's job; ``launch``: ``run_probe``, which starts it.

Only ``launch`` and ``record`` run in the harness; the rest runs in the job (the scaling and case limits
are pure and used on both sides).
"""
