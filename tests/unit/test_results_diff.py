"""The before/after check of a refactor: every result compared, times and run facts ignored."""
import json

from kvutils.core import results_diff


def test_a_changed_number_is_found_and_times_are_not():
    before = {"numbers": {"table2": {"m": {"ops": {"exact": {"mean_kl": 0.0, "seconds": 3.1}}}},
                          "decode": {"m": {"cached_ms": 12.0}}},
              "wall_time_s": 100, "finished": "2026-12-01", "git_commit": "abc"}
    after = json.loads(json.dumps(before))
    after["wall_time_s"] = 90
    after["finished"] = "2026-12-02"
    after["numbers"]["table2"]["m"]["ops"]["exact"]["seconds"] = 2.0
    after["numbers"]["decode"]["m"]["cached_ms"] = 11.0
    assert results_diff.diff(before, after) == []
    after["numbers"]["table2"]["m"]["ops"]["exact"]["mean_kl"] = 1e-9
    (line,) = results_diff.diff(before, after)
    assert line.startswith("numbers.table2.m.ops.exact.mean_kl")
    assert results_diff.diff(before, after, rtol=0.5) == [line]  # 0 vs 1e-9 has no relative closeness


def test_added_and_removed_keys_and_list_items_are_named():
    before = {"per_doc_kl": [0.1, 0.2], "verdict": "a<b"}
    after = {"per_doc_kl": [0.1, 0.2, 0.3], "n": 3}
    lines = results_diff.diff(before, after)
    assert "per_doc_kl[2]: only after" in lines
    assert "verdict: only before" in lines and "n: only after" in lines


def test_folders_and_exit_status(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "01.json").write_text(json.dumps({"x": 1.0}))
    (b / "01.json").write_text(json.dumps({"x": 1.0 + 1e-12}))
    assert results_diff.main([str(a), str(b)]) == 1
    assert "01.json: x" in capsys.readouterr().out
    assert results_diff.main([str(a), str(b), "--rtol", "1e-9"]) == 0
