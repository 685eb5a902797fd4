"""What runs inside a job process (a sandboxed one for candidates, the trusted reference server's for
references), below the entry point ``verifier.worker`` and the timing window's job side (``verifier.window.side``,
``verifier.window.in_process``): the candidate's correctness trials (``correctness``), the reference's outputs
(``worker_reference``), and what they and a window's side share: loading a candidate and the job folder's files
(``candidate``), the op trace (``op_trace``), signal handling (``signals``), results and inputs as tensors
(``tensors``), the allocator's settings (``allocator``). Nothing here imports the window."""
