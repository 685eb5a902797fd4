"""What runs inside a job process (a sandboxed one for candidates, the trusted reference server's for
references): the worker's entry point (``worker.run_job``), the reference's outputs (``worker_reference``),
one side of a timing window (``side``), the reference's own timing figure (``timing``) and what they share
(``common``: the op trace, loading a candidate, flattening results)."""
