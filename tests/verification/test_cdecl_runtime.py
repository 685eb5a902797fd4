"""The extern "C" reader and the runtime's argument checks (real g++ build, real ctypes calls)."""

from __future__ import annotations

import pytest
import torch

from verifier.toolchain.cdecl import DeclarationError, parse_extern_c


def test_reads_single_and_block_declarations():
    src = '''
    #include <cstdint>
    // extern "C" void commented_out(int x);
    extern "C" void relu(const float* __restrict__ x, float* out, int64_t n) { for(;;){} }
    extern "C" {
      float scale(float s, double t) { return s; }
      void fill(float x[], const int n);
      static inline int helper(int a) { return a; }
    }
    '''
    sigs = {s.name: s for s in parse_extern_c(src)}
    assert set(sigs) == {"relu", "scale", "fill", "helper"}
    relu = sigs["relu"]
    assert [(p.name, p.ctype, p.pointer) for p in relu.params] == [("x", "float", True), ("out", "float", True),
                                                                   ("n", "int64_t", False)]
    assert sigs["scale"].restype == "float"
    assert sigs["fill"].params[0].pointer and sigs["fill"].params[1].ctype == "int"


def test_ascend_gm_addr_and_streams():
    sigs = parse_extern_c('extern "C" __global__ __aicore__ void add(GM_ADDR x, GM_ADDR y, uint32_t n);\n'
                          'extern "C" void launch(const float* x, int n, cudaStream_t stream);')
    assert sigs[0].params[0].ctype == "uint8_t" and sigs[0].params[0].pointer
    assert sigs[1].params[-1].ctype == "cudaStream_t"


def test_unsupported_parameter_type_is_a_clear_error():
    with pytest.raises(DeclarationError, match="std::vector|vector"):
        parse_extern_c('extern "C" void f(std::vector<float> v);')


def test_line_continuations_are_joined_as_the_compiler_joins_them():
    # A declaration split over lines by backslash-newlines, and a // comment whose trailing backslash
    # carries it onto the next line: the compiler sees `run(float* x, int n)` and no `ghost` at all.
    src = ('// a note \\\n'
           'extern "C" void ghost(float* x);\n'
           'extern "C" void run(float* x, \\\n'
           '                    int n) {}\n')
    sigs = parse_extern_c(src)
    assert [s.name for s in sigs] == ["run"]
    assert [(p.name, p.ctype, p.pointer) for p in sigs[0].params] == [("x", "float", True), ("n", "int", False)]


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    from verifier.backends import get_backend
    from verifier.build import build_candidate
    from verifier.runtime import load

    src = '''
    #include <cstdint>
    extern "C" void axpy(float a, const float* x, float* y, int64_t n) { for (int64_t i = 0; i < n; ++i) y[i] += a * x[i]; }
    extern "C" int64_t count(const int64_t* v, int n) { int64_t s = 0; for (int i = 0; i < n; ++i) s += v[i]; return s; }
    '''
    result = build_candidate(get_backend("cpu"), {"k.cpp": src}, tmp_path_factory.mktemp("rt"))
    assert result.ok, result.log
    return load(str(result.library))


def test_tensors_and_numbers_are_converted(lib):
    x, y = torch.ones(8), torch.zeros(8)
    lib.axpy(2.5, x, y, 8)
    assert torch.equal(y, torch.full((8,), 2.5))
    assert lib.count(torch.arange(5), 5) == 10


@pytest.mark.parametrize("call, words", [
    (lambda lib: lib.axpy(1.0, torch.ones(8, 2).t(), torch.zeros(16), 16), "not contiguous"),
    (lambda lib: lib.axpy(1.0, torch.ones(8, dtype=torch.float64), torch.zeros(8), 8), "dtype float64"),
    (lambda lib: lib.axpy(1.0, torch.ones(8), torch.zeros(8)), "takes 4 arguments"),
    (lambda lib: lib.axpy(1.0, [1.0], torch.zeros(8), 8), "expected a tensor"),
    (lambda lib: lib.axpy(1.0, torch.ones(8), torch.zeros(8), 8.5), "expected an integer"),
    (lambda lib: lib.nothing(), "has no extern"),
])
def test_wrong_calls_are_refused_with_the_parameter_named(lib, call, words):
    with pytest.raises((TypeError, AttributeError), match=words):
        call(lib)


def test_meta_tensor_is_a_wrong_device(lib):
    with pytest.raises(TypeError, match="is on meta"):
        lib.axpy(1.0, torch.ones(8, device="meta"), torch.zeros(8), 8)


def test_a_damaged_cached_library_is_built_again_not_blamed_on_the_candidate(tmp_path):
    from verifier.backends import get_backend
    from verifier.build import build_candidate

    backend = get_backend("cpu")
    files = {"k.cpp": 'extern "C" int answer(void) { return 42; }\n'}
    first = build_candidate(backend, files, tmp_path)
    assert first.ok and not first.cached
    assert build_candidate(backend, files, tmp_path).cached
    first.library.write_bytes(b"\x7fELF garbage")
    again = build_candidate(backend, files, tmp_path)
    assert again.ok and not again.cached and again.library.read_bytes()[:4] == b"\x7fELF"
    assert len(again.library.read_bytes()) > 100
