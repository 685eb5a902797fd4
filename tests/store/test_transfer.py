"""Export to JSON Lines and import into a fresh workspace: same items, same values; duplicates skipped."""

from __future__ import annotations

import json

import pytest

from store import Store
from store.errors import ImportFormatError, StoreError


def _fill(store, make_exp, n=40):
    ids = [store.add_experience(make_exp(i, parent_id=None if i < 5 else None))[0] for i in range(n)]
    for j in range(0, n, 3):
        store.update_values(ids[j: j + 5], stage="draft", reward=1.0 if j % 2 else -1.0, alpha=0.3, task_id="t")
    store.update_values(ids[:7], stage="refine", reward=0.4, alpha=0.3)
    store.record_adoption("t9", ids[:3])
    store.record_retrieval("t9", ids[:10])
    return ids


def test_export_then_import_into_a_fresh_workspace_reproduces_items_and_values(tmp_path, store, make_exp):
    ids = _fill(store, make_exp)
    out = tmp_path / "memory.jsonl"
    assert store.export_jsonl(out) == 40
    header = json.loads(out.read_text().splitlines()[0])
    assert header["type"] == "evokernel-memory" and header["format"] == 1

    with Store.open(tmp_path / "other" / ".evokernel" / "memory.lmdb") as fresh:
        assert fresh.import_jsonl(out) == (40, 0)
        original = {e.id: e.to_dict() for e in store.iter_experiences()}
        copied = {e.id: e.to_dict() for e in fresh.iter_experiences()}
        assert copied == original
        assert [e.id for e in fresh.iter_experiences()] == ids
        # and the copy is a working memory: retrieval finds the same items
        q = "softmax inner loop omp simd"
        assert [e.id for e, _ in fresh.retrieve(q, k=5)] == [e.id for e, _ in store.retrieve(q, k=5)]


def test_importing_twice_adds_nothing(tmp_path, store, make_exp):
    _fill(store, make_exp, n=12)
    out = tmp_path / "m.jsonl"
    store.export_jsonl(out)
    assert store.import_jsonl(out) == (0, 12)  # into the memory it came from
    with Store.open(tmp_path / "b" / "memory.lmdb") as other:
        assert other.import_jsonl(out) == (12, 0)
        assert other.import_jsonl(out) == (0, 12)
        assert other.count() == 12


def test_import_skips_near_duplicates_with_other_ids(tmp_path, store, make_exp):
    store.add_experience(make_exp(1))
    dup = make_exp(1, id="0000000000aa00000000")
    (tmp_path / "d.jsonl").write_text(json.dumps({"type": "experience", **dup.to_dict()}) + "\n")
    assert store.import_jsonl(tmp_path / "d.jsonl") == (0, 1)


def test_export_with_filters(tmp_path, store, make_exp):
    _fill(store, make_exp, n=30)
    n = store.export_jsonl(tmp_path / "f.jsonl", kind="failure", backend="cuda")
    lines = (tmp_path / "f.jsonl").read_text().splitlines()[1:]
    assert n == len(lines) == store.count(kind="failure", backend="cuda") > 0


@pytest.mark.parametrize(
    "content, words",
    [
        ("{not json\n", r"bad.jsonl:2: not JSON"),
        ('[1, 2]\n', "expected a JSON object"),
        ('{"type": "experience", "kind": "success"}\n', "not an experience"),
        ('{"type": "experience", "task_id": "t", "kind": "nonsense", "backend": "cpu"}\n', "unknown experience kind"),
        ('{"type": "evokernel-memory", "format": 99}\n', "newer than this evokernel reads"),
        ('{"type": "experience", "task_id": "t", "kind": "success", "backend": "cpu", "text": 5}\n', "field text"),
        ('{"type": "experience", "task_id": "t", "kind": "success", "backend": "cpu", "title": null}\n', "field title"),
        ('{"type": "experience", "task_id": "t", "kind": "success", "backend": "cpu", "outcome": "garbage"}\n',
         "field outcome"),
        ('{"type": "experience", "task_id": "t", "kind": "success", "backend": "cpu", "extra": [1, 2]}\n', "field extra"),
        ('{"type": "experience", "task_id": "t", "kind": "success", "backend": "cpu", "q_history": "abc"}\n',
         "field q_history"),
        ('{"type": "experience", "task_id": "t", "kind": "success", "backend": "cpu", "created_at": -1e300}\n',
         "seconds since 1970"),
        ('{"type": "experience", "task_id": "t", "kind": "success", "backend": "cpu", "q1": NaN}\n', "finite"),
        ('{"type": "experience", "task_id": "t", "kind": "success", "backend": "cpu", "outcome": {"feasible": "yes"}}\n',
         "true or false"),
    ],
)
def test_bad_import_files_say_which_line_and_add_nothing(tmp_path, store, make_exp, content, words):
    good = json.dumps({"type": "experience", **make_exp(1).to_dict()}) + "\n"
    path = tmp_path / "bad.jsonl"
    path.write_text(good + content)
    with pytest.raises(ImportFormatError, match=words) as info:
        store.import_jsonl(path)
    assert "\n" not in str(info.value)
    assert store.count() == 0


def test_missing_import_file(tmp_path, store):
    with pytest.raises(StoreError, match="no such file"):
        store.import_jsonl(tmp_path / "nope.jsonl")


def test_a_binary_file_is_not_a_memory_export(tmp_path, store):
    path = tmp_path / "g.jsonl"
    path.write_bytes(b'{"type": "evokernel-memory", "format": 1}\n' + bytes(range(128, 256)) * 20)
    with pytest.raises(ImportFormatError, match="not UTF-8"):
        store.import_jsonl(path)
    assert store.count() == 0
