"""`grader salt show|export|restore` (grader/instructor/salt_file.py): the salt kept and brought back,
never printed, never replaced by another without --force."""
import os

import pytest

from grader.cli import main as grader_main
from grader.instructor.salt_file import SaltError, export, fingerprint, restore, show
from grader.salt import SALT_VARIABLE


@pytest.fixture
def no_variable(monkeypatch):
    monkeypatch.delenv(SALT_VARIABLE, raising=False)


def test_export_then_restore_on_a_fresh_install(tmp_path, no_variable):
    here, fresh = tmp_path / "here" / "salt", tmp_path / "fresh" / "salt"
    here.parent.mkdir()
    fresh.parent.mkdir()
    assert "none yet" in show(here)  # nothing made by looking
    assert not here.exists()
    kept = tmp_path / "kept-salt"
    export(kept, here)  # makes the salt first, as a grading would
    salt = here.read_text().strip()
    assert kept.read_text().strip() == salt and kept.stat().st_mode & 0o077 == 0
    with pytest.raises(SaltError, match="exists"):
        export(kept, here)
    assert "restored" in restore(kept, fresh)
    assert fresh.read_text().strip() == salt and fresh.stat().st_mode & 0o077 == 0
    assert show(fresh) == f"salt: {fresh}, fingerprint {fingerprint(salt)}" and salt not in show(fresh)


def test_another_salt_is_replaced_only_with_force(tmp_path, no_variable):
    path, other = tmp_path / "salt", tmp_path / "other"
    path.write_text("a" * 32 + "\n")
    other.write_text("b" * 32 + "\n")
    with pytest.raises(SaltError, match="regrades every student; --force"):
        restore(other, path)
    assert path.read_text().strip() == "a" * 32
    restore(other, path, force=True)
    assert path.read_text().strip() == "b" * 32
    (tmp_path / "junk").write_text("not a salt\n")
    with pytest.raises(SaltError, match="holds no salt"):
        restore(tmp_path / "junk", path, force=True)


def test_the_command_line(tmp_path, capsys):
    assert grader_main(["salt", "show"]) == 0
    assert f"from ${SALT_VARIABLE}" in capsys.readouterr().out  # the tests pin it (conftest.py)
    assert grader_main(["salt", "export"]) == 2
    assert "needs a FILE" in capsys.readouterr().err
    assert grader_main(["salt", "export", str(tmp_path / "kept")]) == 0
    assert (tmp_path / "kept").read_text().strip() == os.environ[SALT_VARIABLE]
