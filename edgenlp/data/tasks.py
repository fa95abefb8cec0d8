"""Tasks: built-in (``sst2``, ``banking77``, ``imdb``) and users' own folders.

A task folder holds ``train.tsv`` and ``dev.tsv`` with a header row naming a
``text`` and a ``label`` column (in either order). Files are read with Python's
csv module (tab delimiter, standard quoting), so quoted fields with embedded
tabs, quotes or newlines work. Labels are collected from the training file and
sorted, so the label order is stable.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

from edgenlp.errors import DataError

# The largest field read_tsv accepts (the csv module's default is 128 KiB).
MAX_FIELD_CHARS = 1 << 24


@dataclass(frozen=True)
class TaskSpec:
    name: str
    folder: str  # sub-folder of the data directory
    description: str
    primary_metric: str  # "accuracy" or "macro_f1"


BUILTIN_TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in (
        TaskSpec("sst2", "sst2", "binary sentiment of movie-review phrases (GLUE SST-2)", "accuracy"),
        TaskSpec("banking77", "banking77", "77 banking intents from customer messages", "accuracy"),
        TaskSpec("imdb", "imdb", "binary sentiment of full movie reviews (long texts: use 128 or 256 tokens)", "accuracy"),
    )
}


@dataclass(frozen=True)
class Split:
    """Texts and string labels of one split, with the file they came from."""

    texts: tuple[str, ...]
    labels: tuple[str, ...]
    path: str

    def __len__(self) -> int:
        return len(self.texts)

    def head(self, n: int | None) -> "Split":
        if n is None or n >= len(self):
            return self
        return Split(self.texts[:n], self.labels[:n], self.path)

    def sample(self, n: int | None, *, seed: int) -> "Split":
        """A seeded random subset of ``n`` rows (the whole split when ``n`` is None or larger)."""
        if n is None or n >= len(self):
            return self
        return self.take(self.sample_indices(n, seed=seed))

    def sample_indices(self, n: int | None, *, seed: int) -> list[int]:
        """The ascending row indices :meth:`sample` keeps (every row when ``n`` is None or larger)."""
        if n is None or n >= len(self):
            return list(range(len(self)))
        import random

        return sorted(random.Random(seed).sample(range(len(self)), n))

    def take(self, index) -> "Split":
        """The rows at ``index``, in that order."""
        return Split(tuple(self.texts[i] for i in index), tuple(self.labels[i] for i in index), self.path)

    def label_ids(self, labels: tuple[str, ...]) -> list[int]:
        """Map string labels to indices of ``labels``; an unknown label raises :class:`DataError`."""
        index = {l: i for i, l in enumerate(labels)}
        out = []
        for row, label in enumerate(self.labels):
            if label not in index:
                raise DataError(f"{self.path}: row {row + 1}: label {label!r} is not one of the {len(labels)} known labels")
            out.append(index[label])
        return out


@dataclass(frozen=True)
class TaskData:
    name: str
    labels: tuple[str, ...]
    train: Split
    dev: Split
    primary_metric: str = "accuracy"
    builtin: bool = False  # loaded by a built-in task's name (its data is the data the benchmarks measured)

    @property
    def num_labels(self) -> int:
        return len(self.labels)

    def hold_out(self, rows: int, *, seed: int) -> tuple["TaskData", Split]:
        """``(the task tuned without them, validation)``: ``rows`` seeded train rows held out as a validation split.

        The returned task trains on the rest of train and evaluates (and
        early-stops) on the validation rows, so whatever is chosen on it never
        sees dev. A train row whose text is also in dev is never held out, and
        every train row equal to a held-out one (text and label) leaves
        train, so validation is disjoint from both dev and the rows tuned on.
        """
        import random

        if rows < 1:
            raise ValueError(f"rows must be >= 1, got {rows}")
        dev_texts = set(self.dev.texts)
        eligible = [i for i, t in enumerate(self.train.texts) if t not in dev_texts]
        if len(eligible) < rows + 1:
            raise DataError(f"{self.train.path}: {len(eligible)} train rows not in dev, too few to hold out {rows} for validation")
        val = self.train.take(sorted(random.Random(seed).sample(eligible, rows)))
        held = set(zip(val.texts, val.labels))
        keep = [i for i, row in enumerate(zip(self.train.texts, self.train.labels)) if row not in held]
        return TaskData(self.name, self.labels, self.train.take(keep), val, self.primary_metric, self.builtin), val

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "num_labels": self.num_labels,
            "train_file": self.train.path,
            "dev_file": self.dev.path,
            "train_rows": len(self.train),
            "dev_rows": len(self.dev),
        }


def default_data_dir() -> Path:
    """``$EDGENLP_DATA_DIR``, else ``../shared/data`` beside the repository, else beside the working directory."""
    env = os.environ.get("EDGENLP_DATA_DIR")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[2]
    for candidate in (repo.parent / "shared" / "data", Path.cwd().parent / "shared" / "data", Path.cwd() / "shared" / "data"):
        if candidate.is_dir():
            return candidate
    return repo.parent / "shared" / "data"


def read_tsv(path: str | Path) -> Split:
    """Read a ``text``/``label`` TSV (header required, columns found by name).

    Raises :class:`DataError` naming the file and line for a missing file,
    missing columns, a row with the wrong number of fields, an empty text or
    label, or a file with no rows.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    texts: list[str] = []
    labels: list[str] = []
    limit = csv.field_size_limit()
    try:
        csv.field_size_limit(max(limit, MAX_FIELD_CHARS))
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f, delimiter="\t", quotechar='"', strict=True)
            try:
                header = next(reader)
            except StopIteration:
                raise DataError(f"{path}: empty file (expected a header with 'text' and 'label')") from None
            cols = [c.strip().lower() for c in header]
            missing = [c for c in ("text", "label") if c not in cols]
            if missing:
                raise DataError(f"{path}: line 1: header {header!r} lacks column(s) {', '.join(missing)}")
            ti, li = cols.index("text"), cols.index("label")
            for row in reader:
                line = reader.line_num
                if not row or all(not c.strip() for c in row):
                    continue
                if len(row) != len(cols):
                    raise DataError(f"{path}: line {line}: expected {len(cols)} tab-separated fields, found {len(row)}")
                text, label = row[ti].strip(), row[li].strip()
                if not label:
                    raise DataError(f"{path}: line {line}: empty label")
                if not text:
                    raise DataError(f"{path}: line {line}: empty text")
                texts.append(text)
                labels.append(label)
    except csv.Error as exc:
        raise DataError(f"{path}: line {reader.line_num}: malformed TSV ({exc})") from exc
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    finally:
        csv.field_size_limit(limit)
    if not texts:
        raise DataError(f"{path}: no data rows after the header")
    return Split(tuple(texts), tuple(labels), str(path))


def is_builtin(task: str | Path) -> bool:
    """Whether ``task`` names a built-in task (a folder of that name in the working directory is the user's)."""
    return str(task) in BUILTIN_TASKS and not Path(str(task)).is_dir()


def resolve_task_dir(task: str | Path, data_dir: str | Path | None = None) -> tuple[str, Path, str]:
    """(name, folder, primary metric) for a built-in task name or a user's task folder."""
    task_s = str(task)
    if is_builtin(task_s):
        spec = BUILTIN_TASKS[task_s]
        folder = Path(data_dir) if data_dir else default_data_dir()
        return spec.name, folder / spec.folder, spec.primary_metric
    folder = Path(task_s)
    if folder.is_dir():
        return folder.name, folder, "accuracy"
    known = ", ".join(BUILTIN_TASKS)
    raise DataError(f"unknown task {task_s!r}: not a folder and not one of {known}")


def load_task(task: str | Path, *, data_dir: str | Path | None = None) -> TaskData:
    """Load a built-in task by name, or a folder with ``train.tsv`` and ``dev.tsv``.

    >>> data = load_task("sst2")            # doctest: +SKIP
    >>> data.labels, len(data.train)        # doctest: +SKIP
    (('0', '1'), 67349)
    """
    name, folder, metric = resolve_task_dir(task, data_dir)
    if not folder.is_dir():
        raise DataError(f"task {name!r}: data folder {folder} not found (set --data-dir or EDGENLP_DATA_DIR)")
    train = read_tsv(folder / "train.tsv")
    dev = read_tsv(folder / "dev.tsv")
    labels = tuple(sorted(set(train.labels)))
    if len(labels) < 2:
        raise DataError(f"{train.path}: needs at least 2 distinct labels, found {len(labels)}")
    dev.label_ids(labels)  # unknown dev labels are an error naming the row
    return TaskData(name, labels, train, dev, metric, is_builtin(task))
