"""What runs inside a sandboxed job: the worker's entry point (``worker.run_job``) and the reference's side
(``worker_reference``). Its helpers ``verifier.worker_common`` and timing window ``verifier.worker_timing``
join this package once the timing rewrite has landed."""
