import re

import pytest

from edgenlp.data.tasks import default_data_dir, load_task, read_tsv
from edgenlp.errors import DataError
from edgenlp.metrics import accuracy, macro_f1


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_quoted_fields_with_newlines_tabs_and_quotes(tmp_path):
    f = write(tmp_path / "t.tsv", 'label\ttext\nA\t"line one\nline two"\nB\t"tab\there and ""quotes"""\nA\tplain\n')
    split = read_tsv(f)
    assert split.texts == ("line one\nline two", 'tab\there and "quotes"', "plain")
    assert split.labels == ("A", "B", "A")


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "empty file"),
        ("text\tlabel\n", "no data rows"),
        ("sentence\tlabel\nhi\t1\n", "lacks column(s) text"),
        ("text\tlabel\nhi\t1\textra\n", "line 2: expected 2 tab-separated fields, found 3"),
        ("text\tlabel\nhi\t1\nthere\t\n", "line 3: empty label"),
        ('text\tlabel\n"unterminated\t1\n', "malformed TSV"),
    ],
)
def test_malformed_files_name_file_and_line(tmp_path, content, message):
    f = write(tmp_path / "bad.tsv", content)
    with pytest.raises(DataError, match=re.escape(message)) as exc:
        read_tsv(f)
    assert str(f) in str(exc.value)
    assert "\n" not in str(exc.value)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        read_tsv(tmp_path / "nope.tsv")


def test_user_task_folder_labels_sorted_and_unknown_dev_label(tmp_path):
    write(tmp_path / "train.tsv", "text\tlabel\nx\tzebra\ny\tant\nz\tzebra\n")
    write(tmp_path / "dev.tsv", "text\tlabel\nq\tant\n")
    data = load_task(tmp_path)
    assert data.labels == ("ant", "zebra")
    assert data.dev.label_ids(data.labels) == [0]
    write(tmp_path / "dev.tsv", "text\tlabel\nq\tant\nr\tbee\n")
    with pytest.raises(DataError, match="row 2: label 'bee'"):
        load_task(tmp_path)


def test_unknown_task():
    with pytest.raises(DataError, match="unknown task 'nope'"):
        load_task("nope")


def test_builtin_tasks_load_with_documented_sizes():
    for task in ("sst2", "banking77"):
        if not (default_data_dir() / task / "train.tsv").is_file():
            pytest.skip(f"{default_data_dir() / task / 'train.tsv'} missing (the shared data)")
    sst2 = load_task("sst2")
    assert (len(sst2.train), len(sst2.dev), sst2.labels) == (67349, 872, ("0", "1"))
    b77 = load_task("banking77")
    assert (len(b77.train), len(b77.dev), b77.num_labels) == (9003, 1000, 77)
    assert any("\n" in t or '"' in t for t in b77.train.texts)  # quoted fields survive
    if (default_data_dir() / "imdb" / "train.tsv").is_file():  # the long-text task
        imdb = load_task("imdb")
        assert (len(imdb.train), len(imdb.dev), imdb.labels) == (19931, 2000, ("negative", "positive"))


def test_split_sample_is_seeded(tmp_path):
    write(tmp_path / "t.tsv", "text\tlabel\n" + "".join(f"t{i}\t{i % 2}\n" for i in range(50)))
    s = read_tsv(tmp_path / "t.tsv")
    assert s.sample(10, seed=1).texts == s.sample(10, seed=1).texts
    assert s.sample(10, seed=1).texts != s.sample(10, seed=2).texts


def test_metrics():
    assert accuracy([0, 1, 1, 0], [0, 1, 0, 0]) == 0.75
    # class 0: tp=2 fp=0 fn=1 -> 0.8; class 1: tp=1 fp=1 fn=0 -> 2/3
    assert macro_f1([0, 1, 1, 0], [0, 1, 0, 0]) == pytest.approx((0.8 + 2 / 3) / 2)
