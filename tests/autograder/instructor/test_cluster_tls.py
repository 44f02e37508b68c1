"""grade-all on a Dask cluster over TLS (grader/instructor/cluster.py): certificates made here with
Dask's Security.temporary() (the `cryptography` package), a TLS scheduler and worker on
loopback, and one clear message for a tls:// address without certificates."""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attacks import stop_sessions
from grader.cli import main as grader_main
from helpers import EXAMPLES


def test_a_tls_address_without_certificates_says_what_to_give(tmp_path, capsys, monkeypatch):
    for name in list(os.environ):
        if name.startswith("DASK_DISTRIBUTED__COMM__TLS"):
            monkeypatch.delenv(name)
    (tmp_path / "class" / "ada").mkdir(parents=True)
    base = ["grade-all", str(tmp_path / "class"), "--out", str(tmp_path / "out")]
    assert grader_main([*base, "--scheduler", "tls://127.0.0.1:8786"]) == 2
    assert "give --tls-ca-file, --tls-cert and --tls-key" in capsys.readouterr().err
    assert grader_main([*base, "--scheduler", "tcp://127.0.0.1:8786", "--tls-cert", "c.pem"]) == 2
    assert "--tls-cert need a tls:// scheduler address" in capsys.readouterr().err
    assert grader_main([*base, "--scheduler", "tls://127.0.0.1:8786", "--tls-ca-file", "ca.pem",
                        "--tls-cert", "c.pem", "--tls-key", "k.pem"]) == 2
    assert "no such file: --tls-ca-file ca.pem" in capsys.readouterr().err


def _certificates(folder: Path) -> dict[str, Path]:
    """A self-signed CA certificate that signs itself (Dask's temporary one), and its key."""
    from distributed.security import Security

    security = Security.temporary()
    files = {"--tls-ca-file": security.tls_ca_file, "--tls-cert": security.tls_client_cert,
             "--tls-key": security.tls_client_key}
    paths = {}
    for option, text in files.items():
        paths[option] = folder / f"{option.removeprefix('--')}.pem"
        paths[option].write_text(text)
        paths[option].chmod(0o600)
    return paths


def _tls(paths: dict[str, Path]) -> list[str]:
    return [str(part) for option, path in paths.items() for part in (option, path)]


@pytest.mark.slow
@pytest.mark.smoke  # a real Dask scheduler and worker in every run
@pytest.mark.sandbox
@pytest.mark.xdist_group("grade_all")
def test_grade_all_grades_through_a_tls_scheduler(tmp_path):
    pytest.importorskip("cryptography", reason="Security.temporary() makes its certificates with it")
    paths = _certificates(tmp_path)
    address_file = tmp_path / "scheduler.json"
    dask = [sys.executable, "-m", "dask"]
    logs = []

    def start(command: list[str], name: str) -> subprocess.Popen:
        (tmp_path / name).mkdir()
        logs.append(tmp_path / f"{name}.log")
        return subprocess.Popen(command, cwd=tmp_path / name, stdout=subprocess.DEVNULL,
                                stderr=logs[-1].open("w"), start_new_session=True)

    processes = [start([*dask, "scheduler", "--protocol", "tls", "--host", "127.0.0.1", "--port", "0",
                        "--no-dashboard", "--scheduler-file", str(address_file), *_tls(paths)], "scheduler")]
    try:
        deadline = time.monotonic() + 60
        while not address_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(address_file.read_text())["address"]
        assert address.startswith("tls://127.0.0.1:")
        processes.append(start([*dask, "worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard",
                                *_tls(paths)], "worker"))
        shutil.copytree(EXAMPLES / "correct", tmp_path / "class" / "ada")
        out = tmp_path / "out"
        done = subprocess.run([sys.executable, "-m", "grader.cli", "grade-all", str(tmp_path / "class"),
                               "--out", str(out), "--only", "quiz", "--scheduler", address, *_tls(paths)],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr + "".join(log.read_text() for log in logs)
        assert f"on {address}" in done.stderr
        assert json.loads((out / "ada.json").read_text())["score"] == 5
    finally:
        stop_sessions(processes)
