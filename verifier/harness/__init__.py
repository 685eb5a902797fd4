"""The harness side: the Verifier that runs the gates (``verify``), the timing window it coordinates
(``window``: every side in its own process, the clock here), comparisons of outputs (``compare``), the
reference results and their cache (``reference``), a candidate read as files (``candidate_files``), the
seam the engine programs against (``protocol``) and verification on a Ray cluster (``cluster``)."""
