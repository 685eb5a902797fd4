"""The timing window, in one package: where a speed measurement's clock starts and ends, and what each side
pays for a call, are read here.

* ``harness``: the harness's side (this process): the sides' processes coordinated round by round, the clock
  (from continuing a side and writing ``go`` to its ``done``), fresh inputs, the outputs read and spoiled from
  outside, every side's settings watched (``Side``, ``run_window``, ``finish``);
* ``side``: the job's side (a sandboxed process for the candidate and the best, the trusted reference server's
  for the reference): it maps the inputs, calls the model, answers each command;
* ``messages``: the protocol between the two, one typed line per command and answer;
* ``methods``: what one sample is (``[verifier] timing``: a cold call after a flush, or a public suite's way);
* ``in_process``: calls timed inside one process (the reference's own figure for ``evokernel tasks --time``, shown
  and never divided by) and the cache flush before a timed call;
* ``stats``: what a window measured and what it comes to (per-call times, paired ratios and their intervals).

What a ratio says in words ("faster", "same speed", "noisy") is ``verifier.verdict``'s; the performance gate
(``verifier.gates.performance``) judges a window's result; ``verifier.harness.job_runner`` starts a window's
sides in their jobs. Nothing is imported here: ``side`` imports PyTorch and runs inside a job.
"""
