"""Reading a checkpoint's offset log in both of Spark's formats."""

from abstream.io.checkpoint_log import CheckpointReader

METADATA = '{"batchWatermarkMs":0,"batchTimestampMs":1}'


def _checkpoint(folder, offsets: str):
    (folder / "offsets").mkdir(parents=True)
    (folder / "commits").mkdir()
    (folder / "offsets" / "0").write_text(offsets)
    (folder / "commits" / "0").write_text("v1\n{}\n")
    return CheckpointReader(str(folder))


def test_offset_log_v1_one_line_per_source_dash_for_none(tmp_path):
    reader = _checkpoint(tmp_path, f'v1\n{METADATA}\n{{"beacons":{{"0":12,"1":7}}}}\n-\n')
    assert reader.committed().offsets == ({"beacons": {"0": 12, "1": 7}}, None)


def test_offset_log_v2_lines_carry_a_source_id(tmp_path):
    reader = _checkpoint(tmp_path, f'v2\n{METADATA}\n0:{{"beacons":{{"0":12}}}}\n1:-\n')
    assert reader.committed().offsets == ({"beacons": {"0": 12}}, None)
