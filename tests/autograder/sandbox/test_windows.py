"""What differs on Windows as it really runs, where a Linux machine can show it (issue 31): zips that
Windows PowerShell 5.1's Compress-Archive makes (`\\` in entry names), the variables Windows programs read
for a home and temporary files, and the threaded channel the judge uses where pipes cannot be polled."""
import os
import select
import zipfile
from pathlib import Path

import pytest

from grader.sandbox import channel, launch
from grader.submission import unpack
from helpers import ROOT


def test_a_zip_with_backslash_names_is_read_as_folders(tmp_path: Path):
    """PowerShell 5.1 writes `mine\\attention.py` (APPNOTE 4.4.17 asks for `/`): the files are found, and
    `..\\` cannot climb out either."""
    archive = tmp_path / "submission.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("mine\\", b"")
        for source in sorted((ROOT / "exercises").glob("*.py")):
            zf.writestr(f"mine\\{source.name}", source.read_bytes())
    folder = unpack(archive, tmp_path / "out")
    assert folder.name == "mine"
    assert (folder / "attention.py").read_bytes() == (ROOT / "exercises" / "attention.py").read_bytes()

    escaping = tmp_path / "escaping.zip"
    with zipfile.ZipFile(escaping, "w") as zf:
        zf.writestr("..\\..\\attention.py", b"x = 1\n")
    with pytest.raises(Exception, match="outside its folder"):
        unpack(escaping, tmp_path / "out2")


def test_a_worker_on_windows_gets_its_home_in_the_variables_windows_programs_read(monkeypatch, tmp_path):
    monkeypatch.setattr(launch.sys, "platform", "win32")
    env = launch.environment(tmp_path, "C:\\sandbox\\home")
    assert {env[name] for name in ("HOME", "TMPDIR", "USERPROFILE", "TEMP", "TMP", "LOCALAPPDATA")} == {
        "C:\\sandbox\\home"}


def test_where_pipes_cannot_be_polled_the_judge_uses_the_threaded_channel(monkeypatch):
    read_end, write_end = os.pipe()
    reading, writing = open(read_end, "rb", buffering=0), open(write_end, "wb", buffering=0)
    assert isinstance(channel.channel(writing, reading), channel.PollChannel)
    monkeypatch.delattr(select, "poll")
    threaded = channel.channel(writing, reading)
    assert isinstance(threaded, channel.Channel)
    threaded.close()
