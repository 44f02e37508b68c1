"""Pairwise code similarity over a class (grade-all --similarity), with copydetect (winnowed
fingerprints of the tokenized code, so renamed variables still match): each exercise file is
compared with the same file of every other student, and of the reference solutions in case they
leaked. The stubs handed out (generated from the reference, as exercises/ is) are boilerplate:
the scaffolding everyone starts from does not count. Student code is read here, never run.
"""
import importlib.util
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..atomic import write_atomic
from ..submission import MODULES, SubmissionError, unpack

THRESHOLD = 0.75
"""A pair is flagged when this share of either file's fingerprints (beyond the stubs) is in the other.
Independent work on one contract is alike: examples/submissions/correct, written apart from the
reference, shares up to 63% of a file with it (model.py; 16% to 54% for the others)."""
LEFT_OUT = ("quiz",)
"""Files whose right answers are the same for everyone."""
REFERENCE = "(reference solutions)"  # not a student id: those have no parentheses


@dataclass(frozen=True)
class Pair:
    """Two students' copies of one file: the share of each one's code found in the other's."""

    file: str
    first: str
    second: str
    first_share: float
    second_share: float


def _solutions() -> Path:
    return Path(importlib.util.find_spec("solutions").origin).parent


def _write_files(payloads: Mapping[str, tuple[str, bytes]], files: Path, scratch: Path) -> None:
    """files/<student>/<module>.py for every exercise file of every readable submission."""
    for student, (name, data) in payloads.items():
        where = scratch / student
        (where / "payload").mkdir(parents=True)
        (where / "payload" / name).write_bytes(data)
        (where / "unpacked").mkdir()
        try:
            directory = unpack(where / "payload" / name, where / "unpacked")
        except SubmissionError:
            continue  # the gradebook says why it could not be read
        for module in MODULES:
            if module not in LEFT_OUT and (directory / f"{module}.py").is_file():
                (files / student).mkdir(parents=True, exist_ok=True)
                (files / student / f"{module}.py").write_bytes((directory / f"{module}.py").read_bytes())


def _write_stubs(stubs: Path) -> None:
    from ..stubs import stub_file

    stubs.mkdir()
    for module in MODULES:
        (stubs / f"{module}.py").write_text(stub_file(_solutions() / f"{module}.py"))


def compare(payloads: Mapping[str, tuple[str, bytes]], report: Path,
            threshold: float = THRESHOLD) -> list[Pair]:
    """Compare the submissions ({student: (file name, bytes)}), write the HTML report to `report`,
    and return the flagged pairs, most similar first."""
    import matplotlib

    matplotlib.use("Agg")  # copydetect's report draws its figures with pyplot
    from copydetect import CopyDetector

    with tempfile.TemporaryDirectory(prefix="similarity-") as work:
        work = Path(work)
        files = work / "files"
        _write_files(payloads, files, work / "submissions")
        if not files.is_dir():
            return []
        reference = files / REFERENCE
        reference.mkdir()
        for module in MODULES:
            if module not in LEFT_OUT:
                (reference / f"{module}.py").write_bytes((_solutions() / f"{module}.py").read_bytes())
        _write_stubs(work / "stubs")
        detector = CopyDetector(test_dirs=[str(files)], ref_dirs=[str(files)],
                                boilerplate_dirs=[str(work / "stubs")], extensions=["py"],
                                display_t=threshold, same_name_only=True, ignore_leaf=True, autoopen=False,
                                silent=True)
        detector.run()
        pairs = [_pair(Path(first), Path(second), first_share, second_share)
                 for first_share, second_share, first, second, *_ in detector.get_copied_code_list()]
        html = detector.generate_html_report(output_mode="return") or ""
        write_atomic(report, html.replace(f"{files}/", ""))  # paths as student/file.py
    return sorted(pairs, key=lambda p: (-max(p.first_share, p.second_share), p.file, p.first, p.second))


def _pair(first: Path, second: Path, first_share: float, second_share: float) -> Pair:
    if second.parent.name < first.parent.name:  # one order for a pair, whichever file copydetect saw first
        first, second, first_share, second_share = second, first, second_share, first_share
    return Pair(first.name, first.parent.name, second.parent.name, round(float(first_share), 3),
                round(float(second_share), 3))
