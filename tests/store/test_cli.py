"""`evokernel memory stats|list|show|export|import`, human and --json, through the real CLI entry."""

from __future__ import annotations

import json

import pytest

from evotui.cli import main
from store import Store


@pytest.fixture
def workspace(tmp_path, make_exp):
    ws = tmp_path / "ws"
    with Store.open(ws / ".evokernel" / "memory.lmdb") as store:
        ids = [store.add_experience(make_exp(i, created_at=1000.0 + i, q1=i / 10))[0] for i in range(12)]
        store.add_experience(make_exp(12, parent_id=ids[0]))
        store.update_values(ids[:3], stage="refine", reward=0.5, alpha=0.3, task_id="t")
    return ws, ids


def _json(capsys, *argv) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_a_workspace_without_memory_gets_one_line(tmp_path, capsys):
    for action in (["stats"], ["list"], ["show", "abc"], ["export", str(tmp_path / "x.jsonl")]):
        assert main(["-w", str(tmp_path), "memory", *action]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("evokernel: no memory at ") and "\n" not in err
    assert not (tmp_path / ".evokernel").exists()


def test_stats_json_and_human(workspace, capsys):
    ws, _ = workspace
    data = _json(capsys, "-w", str(ws), "memory", "stats", "--json")
    assert data["experiences"] == 13 and data["by_kind"]["failure"] == 4
    assert main(["-w", str(ws), "memory", "stats"]) == 0
    assert "13 experiences" in capsys.readouterr().out


def test_list_filters_sorts_and_pages(workspace, capsys):
    ws, ids = workspace
    data = _json(capsys, "-w", str(ws), "memory", "list", "--json", "--sort", "q1", "--limit", "3")
    assert data["total"] == 13 and [it["id"] for it in data["items"]] == [ids[11], ids[10], ids[9]]
    data = _json(capsys, "-w", str(ws), "memory", "list", "--json", "--kind", "failure", "--backend", "cuda",
                 "--limit", "0")
    assert data["items"] and all(it["kind"] == "failure" and it["backend"] == "cuda" for it in data["items"])
    data = _json(capsys, "-w", str(ws), "memory", "list", "--json", "--asc", "--limit", "2", "--offset", "1")
    assert [it["id"] for it in data["items"]] == ids[1:3]
    assert main(["-w", str(ws), "memory", "list", "--source", "human"]) == 0
    said = capsys.readouterr()   # piped: the table on stdout as TSV, its title on stderr
    assert "experiences by recency" in said.err and said.out.startswith("id\t#\ttask\t")   # #: an attempt as the tree numbers it


def test_show_by_id_and_prefix(workspace, capsys):
    ws, ids = workspace
    data = _json(capsys, "-w", str(ws), "memory", "show", ids[0], "--json")
    assert data["id"] == ids[0] and data["n2"] == 1 and data["q_history"][0]["stage"] == "refine"
    assert len(data["children"]) == 1 and data["files"]["kernel.cpp"].startswith('extern "C"')
    assert main(["-w", str(ws), "memory", "show", ids[0]]) == 0
    out = capsys.readouterr().out
    assert ids[0] in out and "kernel.cpp" in out and "value history" in out
    assert main(["-w", str(ws), "memory", "show", "zzz"]) == 2
    assert "no experience with id 'zzz'" in capsys.readouterr().err


def test_export_then_import_into_another_workspace(workspace, tmp_path, capsys):
    ws, _ = workspace
    out = tmp_path / "mem.jsonl"
    assert _json(capsys, "-w", str(ws), "memory", "export", str(out), "--json") == {"exported": 13, "file": str(out)}
    other = tmp_path / "other"
    got = _json(capsys, "-w", str(other), "memory", "import", str(out), "--json")
    assert (got["added"], got["skipped"], got["total"]) == (13, 0, 13)
    assert main(["-w", str(other), "memory", "import", str(out)]) == 0
    assert "imported 0 experiences" in capsys.readouterr().out
    a = _json(capsys, "-w", str(ws), "memory", "list", "--json", "--limit", "0")["items"]
    b = _json(capsys, "-w", str(other), "memory", "list", "--json", "--limit", "0")["items"]
    assert a == b
    assert main(["-w", str(other), "memory", "export", str(tmp_path / "f.jsonl"), "--kind", "success"]) == 0
    assert "exported 5 experiences" in capsys.readouterr().out
