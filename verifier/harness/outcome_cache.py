"""The outcome cache: a candidate of the same bytes (``exact_digest``: every file exactly as the build and the import
read it; never the comment-blind ``candidate_identity``, since a comment can change what they read: ``__LINE__``, a
coding declaration) verified before on this machine, with the same settings and the same best, gets its recorded
Outcome back (``Outcome.from_cache``) unless the caller asks for a fresh verification. Every gate is deterministic
but the timing, which was measured here.

Keys hash what decides a verdict: ``OUTCOME_FORMAT`` (bumped when the gates change what they decide), the
candidate's and the best's bytes, the task (its source, sizes and tolerances), the backend's build key,
every verifier setting, and this machine's fingerprint. Outcomes whose failure may be the machine's load
(a timeout, a lost job: ``transient``) or the verifier's own are never stored, nor is an outcome that judges
nothing (``Outcome.not_judged``: the tool's failure).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from verifier.config import VerifyConfig
from verifier.machine.facts import fingerprint
from verifier.outcome import Outcome
from verifier.task import TaskSpec

OUTCOME_FORMAT = 9  # bump when the gates change what they decide (3: the link check, the allow-list view;
#                     4: fresh seeds, widened trials, a larger second shape;
#                     5: paired timing, speed verdicts within the noise, every timed call checked;
#                     6: every side in its own process, the clock in the harness, fresh draws every round;
#                     7: one verdict rule: an interval reaching beyond the noise limit from equal speed is noisy;
#                     8: drawn tail remainders and a tiny shape, repeated calls, outputs read by the harness;
#                     9: keyed by the files' exact bytes, no longer by their comment-blind identity)


class OutcomeCache:
    """Recorded outcomes in ``folder``, one JSON file per key."""

    def __init__(self, folder: Path):
        self.folder = folder

    @staticmethod
    def key(task: TaskSpec, candidate: str, best: str, backend: Any, config: VerifyConfig) -> str:
        """What a verdict depends on, hashed (see the module's docstring); ``candidate`` and ``best``: the files'
        exact digests (``verifier.candidate_files.exact_digest``; "" for no best)."""
        text = json.dumps([OUTCOME_FORMAT, candidate, best, task.key, task.atol, task.rtol,
                           backend.build_key(), config.model_dump(mode="json"),
                           fingerprint(config.threads, backend.name)],
                          sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def get(self, key: str) -> Outcome | None:
        """The outcome recorded under ``key``, None when there is none (or it cannot be read)."""
        try:
            return Outcome.from_dict(json.loads((self.folder / f"{key}.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def put(self, key: str, out: Outcome) -> None:
        """Record ``out`` under ``key`` (atomically: a reader never sees half a file)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{key}.{threading.get_ident()}.tmp"
        tmp.write_text(json.dumps(out.to_dict()))
        os.replace(tmp, self.folder / f"{key}.json")


def recorded(cache_dir: Path, task: TaskSpec, folder: Path, best: dict[str, str] | None, backend: Any,
             config: VerifyConfig) -> Outcome | None:
    """The outcome ``Verifier(backend, config, cache_dir).verify(task, folder, best=best)`` would give from its record,
    or None (none, or the folder cannot be read: verifying it says why): looked up without a verifier, its sandbox or
    PyTorch (``evokernel verify`` answers a recorded verdict at once). ``backend``: a backend or its name."""
    from verifier.backends import get_backend
    from verifier.candidate_files import candidate_hash, exact_digest, read_candidate

    try:
        files = read_candidate(folder)
    except OSError:
        return None
    backend = get_backend(backend) if isinstance(backend, str) else backend
    # the verifier's own key: the files' exact bytes (issue #48: never the comment-blind identity)
    key = OutcomeCache.key(task, exact_digest(files), exact_digest(best) if best else "", backend, config)
    found = OutcomeCache(Path(cache_dir) / "outcomes").get(key)
    if found is not None:
        found.from_cache, found.candidate_hash = True, candidate_hash(files)
    return found
