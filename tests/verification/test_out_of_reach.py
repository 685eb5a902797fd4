"""Issue #48: nothing the candidate's process can reach decides a verdict. A fourth white-box review found five
candidates that earned verdicts by changing what the harness decided from inside the candidate's own process;
each is a regression test here, seen passing the verifier on main (9022ba0) before its fix:

1. the memory probe: a candidate maps a still-empty file below everything else, the harness's one-byte probe of the
   side's first mapping fails, and from then on the side picks its own checked values (its Python patched to do the
   work after the clock);
2. load-time code the source rules miss: a C++ dynamic initializer (``static int booted = boot();``) reaches Python
   when the library is loaded, turns the op trace off and has PyTorch compute every output;
3. the candidate phase switched off from inside: load-time Python replaces the function that enters it;
4. and 5. a recorded verdict served to code that behaves differently: the outcome cache keyed by the comment-blind
   identity (a C kernel that reads ``__LINE__``, a ``model.py`` with a coding declaration).

Their static rules are off (``unguarded``) where the exploit needs a word they refuse: the rules are a friendly
first filter, never the wall; what is tested is what holds without them.
"""

from __future__ import annotations

import pytest

import candidates as C

# ----------------------------------------------------------------------------- 4. and 5. the outcome cache


@pytest.fixture
def guarded(tmp_path, fast_config):
    """Every gate on, with an outcome cache of its own."""
    from verifier.harness.verify import Verifier

    v = Verifier("cpu", fast_config, cache_dir=tmp_path / "cache")
    yield v
    v.close()


# ReLU over the whole input where this line's number is odd, over half of it where it is even: a comment line
# added above it (which the comment-blind identity does not see) changes what the compiler reads.
BY_LINE = '''#include <cstdint>
extern "C" void relu_forward(const float* x, float* out, int64_t n) {
    const int64_t end = (__LINE__ % 2) ? n : n / 2;
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < end; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
}
'''
BY_LINE_HALF = BY_LINE.replace("#include <cstdint>\n", "#include <cstdint>\n// one line more\n")

# The number of characters of a string literal: 1 where model.py is read as UTF-8 (Python's default), 2 where its
# first line declares Latin-1 (the two bytes of "é" read as two characters): half the output left unwritten.
BY_CODING = C.ELEMENTWISE_MODEL.replace("lib.{fn}(x, out, x.numel())", 'lib.{fn}(x, out, x.numel() // len("é"))')
BY_CODING_HALF = "# -*- coding: latin-1 -*-\n" + BY_CODING.lstrip("\n")


@pytest.mark.slow
@pytest.mark.parametrize("honest,wrong", [
    ({"model.py": C.ELEMENTWISE_MODEL.format(fn="relu_forward"), "kernel.cpp": BY_LINE},
     {"model.py": C.ELEMENTWISE_MODEL.format(fn="relu_forward"), "kernel.cpp": BY_LINE_HALF}),
    ({"model.py": BY_CODING.format(fn="relu_forward"), "kernel.cpp": C.RELU},
     {"model.py": BY_CODING_HALF.format(fn="relu_forward"), "kernel.cpp": C.RELU}),
], ids=["__LINE__", "coding"])
def test_a_recorded_verdict_is_served_only_to_the_bytes_it_was_made_from(guarded, suite, make_candidate, honest, wrong):
    """Before (main 9022ba0): the outcome cache was keyed by the comment-blind identity, so the wrong kernel got the
    honest one's recorded "feasible" (``from_cache``) while computing half its output, and, the other way round, once
    the wrong one was verified, the honest one its refusal. After: keyed by the exact bytes the build and the import
    read."""
    from verifier.harness.candidate_files import candidate_identity

    assert candidate_identity(honest) == candidate_identity(wrong)     # the same code, comments and spacing aside
    relu = suite.get("relu").spec()
    first = guarded.verify(relu, make_candidate(honest), fresh=True)
    assert first.feasible, first.message
    served = guarded.verify(relu, make_candidate(wrong))
    assert not served.from_cache and served.failed_gate == "correctness", (served.from_cache, served.message)
    refused = guarded.verify(relu, make_candidate(wrong), fresh=True)
    assert refused.failed_gate == "correctness", refused.message
    again = guarded.verify(relu, make_candidate(honest))
    assert again.feasible, (again.from_cache, again.message)
