"""Retrieval: a BM25 pool of the K most similar experiences, filtered, kept current, rebuilt when missing."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from store import Experience, Store
from store import index as index_module
from store.store import index_dir
from store.terms import document_text, terms

ROOT = Path(__file__).resolve().parents[2]
WORDS = ("softmax rowmax exp sum reduction tile simd omp vector shuffle warp tiling blocked gemm "
         "cumsum prefix scan layernorm mean variance rsqrt pooling window stride conv im2col "
         "relu clamp gelu tanh erf sigmoid bias fused epilogue transpose packing unroll").split()


def _corpus(n: int, seed: int = 0) -> list[Experience]:
    import random

    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 40)))
        out.append(Experience(task_id=f"t{i % 13}", kind=rng.choice(["success", "failure", "best_practice"]),
                              backend=rng.choice(["cpu", "cuda", "ascend", ""]), stage="draft",
                              title=f"item {i}", text=words, q1=rng.uniform(-1, 1), q2=rng.uniform(-1, 1)))
    return out


def _exact_bm25(docs: list[list[str]], query: str, k1=1.5, b=0.75) -> list[float]:
    n = len(docs)
    avgdl = sum(map(len, docs)) / n
    df = Counter(t for d in docs for t in set(d))
    out = []
    for d in docs:
        tf = Counter(d)
        s = 0.0
        for t in dict.fromkeys(terms(query)):
            if tf[t]:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                s += idf * tf[t] / (tf[t] + k1 * (1 - b + b * len(d) / avgdl))
        out.append(s)
    return out


def test_ranking_matches_exact_bm25(store):
    store.add_experiences(_corpus(300))
    store.build_index()
    all_exps = list(store.iter_experiences())
    docs = [terms(document_text(e.to_dict(), e.files)) for e in all_exps]
    for query in ("softmax rowmax reduction", "conv im2col tiling", "gelu erf tanh epilogue"):
        exact = _exact_bm25(docs, query)
        want = sorted(range(len(all_exps)), key=lambda i: -exact[i])[:10]
        got = store.retrieve(query, k=10)
        assert [e.id for e, _ in got] == [all_exps[i].id for i in want]
        assert [s for _, s in got] == pytest.approx([exact[i] for i in want], rel=1e-4)


def test_backend_kind_floor_and_exclusion_filters(store):
    store.add_experiences(_corpus(200))
    query = "softmax reduction simd"
    cuda = store.retrieve(query, k=50, backend="cuda")
    assert cuda and {e.backend for e, _ in cuda} <= {"cuda", ""}
    assert "" in {e.backend for e, _ in cuda}  # backend-agnostic knowledge matches any backend
    failures = store.retrieve(query, k=50, kinds=["failure"])
    assert failures and {e.kind for e, _ in failures} == {"failure"}
    draft = store.retrieve(query, k=50, stage="draft", q_floor=0.2)
    assert draft and all(e.q1 >= 0.2 for e, _ in draft)
    refine = store.retrieve(query, k=50, stage="refine", q_floor=0.2)
    assert refine and all(e.q2 >= 0.2 for e, _ in refine)
    top = store.retrieve(query, k=5)
    rest = store.retrieve(query, k=5, exclude_ids=[e.id for e, _ in top[:2]])
    assert [e.id for e, _ in rest][:3] == [e.id for e, _ in top[2:5]]
    scores = [s for _, s in store.retrieve(query, k=40)]
    assert scores == sorted(scores, reverse=True) and len(scores) == 40
    assert store.retrieve(query, k=0) == []
    assert store.retrieve("zzzunknownword", k=5) == []
    with pytest.raises(ValueError, match="stage"):
        store.retrieve(query, k=5, q_floor=0.0)


def test_q_floor_follows_value_updates(store):
    exps = _corpus(50)
    for e in exps:
        e.q1 = 0.0
    store.add_experiences(exps)
    top = store.retrieve("softmax", k=3, stage="draft", q_floor=-0.8)
    victim = top[0][0].id
    for _ in range(10):
        store.update_values([victim], stage="draft", reward=-1.0, alpha=0.3)
    after = store.retrieve("softmax", k=3, stage="draft", q_floor=-0.8)
    assert victim not in [e.id for e, _ in after]
    assert victim in [e.id for e, _ in store.retrieve("softmax", k=3, stage="refine", q_floor=-0.8)]


def test_new_experiences_are_retrievable_at_once(store):
    store.add_experiences(_corpus(100))
    store.retrieve("softmax", k=5)  # builds the index
    fresh = Experience(task_id="t_new", kind="success", backend="cpu", text="winograd transform for conv3x3")
    store.add_experience(fresh)
    got = store.retrieve("winograd conv3x3", k=3)
    assert got[0][0].id == fresh.id


def test_experiences_written_by_another_process_are_seen(store, store_path):
    store.add_experiences(_corpus(50))
    store.retrieve("softmax", k=5)
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
        "from store import Store, Experience\n"
        f"with Store.open({str(store_path)!r}) as s:\n"
        "    s.add_experience(Experience(task_id='x', kind='rule', backend='', text='bitonic sort network'))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    got = store.retrieve("bitonic network", k=1)
    assert got and got[0][0].text == "bitonic sort network"


def test_open_does_not_touch_the_index_and_a_saved_index_is_reused(store_path):
    with Store.open(store_path) as s:
        s.add_experiences(_corpus(120))
        assert not index_dir(store_path).exists()  # nothing built at open or insert
        first = s.retrieve("gemm tiling", k=5)
    current = (index_dir(store_path) / "CURRENT").read_text()
    with Store.open(store_path, readonly=True) as s:
        again = s.retrieve("gemm tiling", k=5)
    assert (index_dir(store_path) / "CURRENT").read_text() == current  # loaded, not rebuilt
    assert [e.id for e, _ in again] == [e.id for e, _ in first]


@pytest.mark.parametrize("damage", ["delete", "garble", "foreign"])
def test_missing_damaged_or_foreign_index_is_rebuilt(tmp_path, damage):
    a, b = tmp_path / "a" / "memory.lmdb", tmp_path / "b" / "memory.lmdb"
    with Store.open(a) as s:
        s.add_experiences(_corpus(80, seed=1))
        want = [e.id for e, _ in s.retrieve("cumsum prefix scan", k=5)]
    if damage == "delete":
        shutil.rmtree(index_dir(a))
    elif damage == "garble":
        gen = index_dir(a) / (index_dir(a) / "CURRENT").read_text()
        (gen / "meta.json").write_text("{not json")
    else:  # an index copied from another memory
        with Store.open(b) as s:
            s.add_experiences(_corpus(10, seed=2))
            s.build_index()
        shutil.rmtree(index_dir(a))
        shutil.copytree(index_dir(b), index_dir(a))
    with Store.open(a) as s:
        assert [e.id for e, _ in s.retrieve("cumsum prefix scan", k=5)] == want


def test_a_large_delta_is_merged_into_the_main_index(store, monkeypatch):
    monkeypatch.setattr(index_module, "MIN_DELTA", 20)
    store.add_experiences(_corpus(100, seed=3))
    store.retrieve("softmax", k=5)
    before = (index_dir(store.path) / "CURRENT").read_text()
    store.add_experiences(_corpus(15, seed=4))  # under the threshold: kept in the delta
    with_delta = [e.id for e, _ in store.retrieve("warp shuffle reduction", k=10)]
    assert (index_dir(store.path) / "CURRENT").read_text() == before
    store.build_index()  # the same corpus, all in the main index: the delta ranked alike
    rebuilt = [e.id for e, _ in store.retrieve("warp shuffle reduction", k=10)]
    assert len(set(with_delta[:5]) & set(rebuilt[:5])) >= 4
    before = (index_dir(store.path) / "CURRENT").read_text()
    store.add_experiences(_corpus(30, seed=5))  # past the threshold: merged
    store.retrieve("softmax", k=5)
    after = (index_dir(store.path) / "CURRENT").read_text()
    assert after != before and after.startswith(f"gen-{store.count()}-")


def test_vectorised_build_equals_bm25s_own_index():
    import bm25s
    import numpy as np

    from store.index import K1, B, bm25_from_counts
    from store.terms import term_counts

    texts = [e.text + " " + e.title for e in _corpus(150, seed=9)]
    vocab: dict[str, int] = {}
    term_ids, tfs, sizes, lengths, corpus = [], [], [], [], []
    for text in texts:
        counts = term_counts(text)
        term_ids += [vocab.setdefault(t, len(vocab)) for t in counts]
        tfs += counts.values()
        sizes.append(len(counts))
        lengths.append(sum(counts.values()))
        corpus.append([vocab[t] for t in terms(text)])
    ours = bm25_from_counts(vocab, np.asarray(term_ids, dtype=np.int32), np.asarray(tfs, dtype=np.float32),
                            np.asarray(sizes), np.asarray(lengths, dtype=np.float32))
    theirs = bm25s.BM25(k1=K1, b=B, method="lucene")
    theirs.index((corpus, dict(vocab)), show_progress=False)
    for query in ("softmax tile", "gemm bias fused epilogue relu", "scan"):
        qids = [vocab[t] for t in terms(query)]
        assert np.allclose(ours.get_scores_from_ids(qids), theirs.get_scores_from_ids(qids), rtol=1e-5)


def test_ties_never_repeat_or_drop_items_when_walking_past_the_first_pool(store):
    # forty identical lessons on distinct tasks score exactly alike; a Q floor forces a long walk
    same = [Experience(task_id=f"t{i}", kind="rule", backend="", text="blocked tiling of the gemm k loop",
                       q1=-1.0 if i < 35 else 0.5) for i in range(40)]
    store.add_experiences(same)
    got = store.retrieve("gemm tiling", k=10, stage="draft", q_floor=0.0)
    assert len(got) == 5 and len({e.id for e, _ in got}) == 5
    everything = store.retrieve("gemm tiling", k=100)
    assert len(everything) == 40 and len({e.id for e, _ in everything}) == 40
