"""Issue 27, item 9 (the words): when `evokernel verify` finds the workbench's recorded refinement for
the same files, it names that attempt `#n`, as the tree and the memory browser do, not by a hex id."""

from __future__ import annotations

from memory_content import _id


def test_the_recorded_refinement_is_named_as_the_tree_numbers_it(filled_workspace):
    from core.attempts import recorded_best
    from store import Store

    with Store.open(filled_workspace.memory_path) as store:
        store.update_extra(_id(7), {"best": _id(5)})   # relu's refinement #5, timed beside the best #3
        refine = store.get(_id(7))
        files, best_files = dict(refine.files), dict(store.get(_id(5)).files)
    folder = filled_workspace.kernels_dir / "relu"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    assert recorded_best(filled_workspace, "relu", folder, "cpu") == ("#5", best_files)
