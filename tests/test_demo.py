from abstream.demo import MARKER, prepare_data_dir


def test_a_previous_demo_dir_is_cleared_and_marked_again(tmp_path):
    data = tmp_path / "demo"
    prepare_data_dir(data)
    (data / "landing").mkdir()
    (data / "landing" / "old.jsonl").write_text("{}\n")
    prepare_data_dir(data)
    assert sorted(p.name for p in data.iterdir()) == [MARKER]


def test_an_empty_or_missing_dir_is_fine(tmp_path):
    prepare_data_dir(tmp_path / "new")
    (tmp_path / "empty").mkdir()
    prepare_data_dir(tmp_path / "empty")
    assert (tmp_path / "new" / MARKER).exists() and (tmp_path / "empty" / MARKER).exists()
