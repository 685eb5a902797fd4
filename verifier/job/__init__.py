"""What runs inside a job process (a sandboxed one for candidates, the trusted reference server's for
references), below the entry point ``verifier.worker``: the candidate's correctness trials (``correctness``),
the reference's outputs (``worker_reference``), calls timed in one process and the reference's own timing figure
(``timing``), and what they and a timing window's side (``verifier.window.side``) share: loading a candidate
and the job folder's files (``candidate``), the op trace (``op_trace``), signal handling (``signals``), results
and inputs as tensors (``tensors``), the allocator's settings (``allocator``)."""
