"""A 120-student rehearsal on this machine (`grader rehearse --size 120`, Canvas, --jobs = cores): its
table, wall time and CPU per submission, for docs/grading.md ("Running a course").

    python benchmarks/bench_rehearse.py [OUT_DIR]
"""
import sys
import tempfile
from pathlib import Path

from grader.cli import main

SIZE = 120

if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="bench-rehearse-"))
    code = main(["rehearse", "--out", str(out), "--size", str(SIZE)])
    print((out / "rehearsal.md").read_text())
    sys.exit(code)
