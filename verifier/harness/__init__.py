"""The harness side: the Verifier that runs the gates (``verify``), the jobs it runs and reads back
(``job_runner``, a timing window's sides included: ``verifier.window``), comparisons of outputs (``compare``), the
reference results and their cache (``reference``), a candidate read as files (``candidate_files``), the
seam the engine programs against (``protocol``) and verification on a Ray cluster (``cluster``)."""
