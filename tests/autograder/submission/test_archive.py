"""grader/archive.py: every zip the grader opens is extracted with caps, and every zip it writes
depends on its files only. The class-level test puts a real 2 GiB zip bomb inside a Canvas-like
export: the other students are graded, the bomb is one `unreadable` row, and the bomb is never
written out."""
import csv
import io
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.archive import ArchiveError, deterministic_zip, folder_files, safe_extract
from grader.submission import MAX_ZIP_BYTES
from helpers import EXAMPLES

BOMB_BYTES = 2 << 30


@pytest.fixture(scope="module")
def bomb(tmp_path_factory) -> Path:
    """A zip of 9 MB whose attention.py unpacks to 2 GiB of zeros."""
    path = tmp_path_factory.mktemp("bomb") / "mallory.zip"
    chunk = bytes(1 << 24)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive, \
            archive.open("attention.py", "w", force_zip64=True) as member:
        for _ in range(BOMB_BYTES // len(chunk)):
            member.write(chunk)
    return path


def _used(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


@pytest.mark.slow
@pytest.mark.smoke
def test_a_zip_bomb_is_refused_before_anything_is_written(bomb, tmp_path):
    with pytest.raises(ArchiveError, match="unpacks to more than 20 MiB"):
        safe_extract(bomb, tmp_path, MAX_ZIP_BYTES, 100)
    assert _used(tmp_path) == 0


def test_entries_outside_the_folder_are_refused_and_links_left_out(tmp_path):
    path = tmp_path / "evil.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("ok.py", "x = 1\n")
        link = zipfile.ZipInfo("link.py")
        link.external_attr = 0o120777 << 16  # a symbolic link, as Info-ZIP records one
        archive.writestr(link, "/etc/passwd")
    out = tmp_path / "out"
    assert safe_extract(path, out, 1 << 20, 10) == ["link.py"]
    assert [p.name for p in out.iterdir()] == ["ok.py"]
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("../escape.py", "x = 2\n")
    with pytest.raises(ArchiveError, match="outside its folder"):
        safe_extract(path, tmp_path / "again", 1 << 20, 10)
    assert not (tmp_path / "escape.py").exists()


def test_caps_on_files_and_broken_zips(tmp_path):
    path = tmp_path / "many.zip"
    path.write_bytes(deterministic_zip((f"f{i}.py", b"") for i in range(5)))
    with pytest.raises(ArchiveError, match="more than 4 files"):
        safe_extract(path, tmp_path / "out", 1 << 20, 4)
    broken = tmp_path / "broken.zip"
    broken.write_bytes(path.read_bytes()[:-30])
    with pytest.raises(ArchiveError, match="cannot unpack"):
        safe_extract(broken, tmp_path / "out2", 1 << 20, 10)


def test_a_written_zip_depends_on_its_files_only(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.py").write_text("x = 1\n")
    (tmp_path / "a" / "__pycache__").mkdir()
    (tmp_path / "a" / "__pycache__" / "x.pyc").write_bytes(b"junk")
    (tmp_path / "a" / "link.py").symlink_to("/etc/hostname")
    first = deterministic_zip(folder_files(tmp_path / "a"))
    (tmp_path / "a" / "x.py").touch()  # a new mtime
    assert deterministic_zip(folder_files(tmp_path / "a")) == first
    assert zipfile.ZipFile(io.BytesIO(first)).namelist() == ["x.py"]


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_bomb_inside_a_class_export_costs_its_row_only(bomb, tmp_path):
    export = tmp_path / "export.zip"
    with zipfile.ZipFile(export, "w") as archive:
        for name, data in folder_files(EXAMPLES / "correct", prefix="submissions/alice/"):
            archive.writestr(name, data)
        archive.write(bomb, "submissions/mallory.zip")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "grader.cli", "grade-all", str(export), "--out", str(out),
                           "--only", "quiz", "--jobs", "1"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = {row["student"]: row for row in csv.DictReader((out / "gradebook.csv").open())}
    assert rows["alice"]["status"] == "graded" and float(rows["alice"]["total"]) == 5
    assert rows["mallory"]["status"] == "unreadable"
    assert "unpacks to more than 20 MiB" in (out / "summary.md").read_text()
    assert json.loads((out / "alice.json").read_text())["score"] == 5
    assert _used(out) < 10 << 20
    shutil.rmtree(out)
