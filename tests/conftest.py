"""Fixtures and session set-up only; shared helpers are in helpers.py.

The tests' own @given functions run under the "lab" profile, loaded here once before any test
module is imported: derandomized (every run sees the same examples) and without a deadline. The
grader's cases do not depend on it: Suite.case applies grader.suites.GRADER_SETTINGS to each.
"""
import os
from pathlib import Path

import pytest
import torch
from hypothesis import settings
from tqdm import tqdm

from grader.sandbox.modes import mode
from helpers import DTYPES

# One salt for every run of the suite (and the graders it starts), whatever the machine's own
# salt: what the tests assert the hidden tests catch must not depend on it.
os.environ.setdefault("GRADER_SALT", "tests")

# tqdm (grade-all's progress, copydetect's) starts a monitor thread, which would outlive its test: a
# later grading in the same test process would then launch its template rather than fork it (no fork
# with another thread alive: template_client.forks_template), and the forked variants would skip.
tqdm.monitor_interval = 0

# Every tensor here is tiny: a second intra-op thread only adds synchronisation, and on a busy
# 2-core machine it makes runs several times slower (measured: test_model.py 50 s vs 21 s).
torch.set_num_threads(1)

settings.register_profile("lab", derandomize=True, database=None, deadline=None, max_examples=12,
                          print_blob=False)
settings.load_profile("lab")


@pytest.fixture(params=DTYPES, ids=["float32", "float64"])
def dtype(request: pytest.FixtureRequest) -> torch.dtype:
    return request.param


@pytest.fixture(scope="session", autouse=True)
def _traversable_tmp(tmp_path_factory: pytest.TempPathFactory) -> None:
    """In "setuid" mode a worker, under a uid of its own, reaches its sandbox's folders by their paths
    (docs/grading.md, "Worker"): the folders pytest makes above each test's own, private to us, must let
    it pass (traverse only, as the sandbox's own folders do)."""
    if mode() != "setuid":
        return
    folder = tmp_path_factory.getbasetemp()
    while folder != Path(folder.anchor) and not folder.stat().st_mode & 0o001:
        folder.chmod(folder.stat().st_mode | 0o011)
        folder = folder.parent
