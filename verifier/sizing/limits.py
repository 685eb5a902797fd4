"""The sizer's limits and constants: the window "auto" aims for, the memory caps, the time limits, the
nominal rates the work model counts at, and the search's budgets. Every number the sizing package
decides by lives here, with why."""

from __future__ import annotations

WINDOW_MS = (2.0, 50.0)       # the reference time "auto" aims for, on this machine
BYTES_CAP = 1 << 30           # parameters + one case's inputs, at most (the memory cap per task)
CALL_CAP_S = 2.0              # one reference call longer than this is not repeated: shrink first
PROBE_TIMEOUT_S = 120.0       # a probe (sizing + timing one task) is killed after this
MAX_GROWTH = 64.0             # "auto" grows a small task by at most this factor per size
MAX_STEPS = 20               # "auto" measures at most this many times (a size near the window is measured twice)
START_BYTES = 32 << 20        # "auto" starts here when a task's work cannot be counted on the meta device
# "auto" chooses sizes from the work counted on the meta device (bytes moved, FLOPs: the roofline's count),
# at these nominal rates of one core running PyTorch, so the same task gets the same sizes whatever the
# machine's load; a timing only confirms, and corrects the rate in steps of RATE_STEP when it disagrees
NOMINAL_GBPS = 8.0
NOMINAL_GFLOPS = 50.0
RATE_STEP = 4.0
# a forward the meta device cannot run (nonzero's output size, a value read in it) is counted on real tensors
# instead, at these two small sizes of each case (input bytes), and carried to the case's size
# (verifier.sizing.work; its dispatched operators counted too, at NOMINAL_OP_US each: such a forward is often
# a Python loop)
REAL_COUNT_BYTES = (4 << 10, 16 << 10)
NOMINAL_OP_US = 5.0
# The time limit of a multi-case task's reference, per call of one case: a verification runs every case's
# trials (about seven each) and a timing window per case, so all the cases' calls together stay within
# CASES_TIME_MS and no case over CASE_CAP_MS (a case over it is shrunk, or dropped at its smallest sizes)
CASE_CAP_MS = 1000.0
CASES_TIME_MS = 20_000.0
# The inputs of all a multi-case task's cases together, once, at most: a verification keeps the reference's
# results of every trial of every case (about six per case), so this bounds them to a few hundred MiB.
CASES_BYTES_BUDGET = 48 << 20
BUSY_ON_CPU = 0.75  # a call whose threads ran for less of its wall time than this waited for a CPU
