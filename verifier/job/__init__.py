"""What runs inside a job process (a sandboxed one for candidates, the trusted reference server's for
references): the worker's entry point (``worker.run_job``), the reference's outputs (``worker_reference``),
one side of a timing window (``side``), calls timed in one process and the reference's own timing figure
(``timing``), and what they share: loading a candidate and the job folder's files (``candidate``), the op
trace (``op_trace``), signal handling (``signals``), results and inputs as tensors (``tensors``), the
allocator's settings (``allocator``)."""
