"""`grader experiments` (a plugin command of the grader CLI): run the lab's studies on an \
implementation and write a report.

    grader experiments [--impl solutions|exercises|PATH] [--quick] [--seeds N] [--out DIR]

Writes DIR/report.md (tables, findings, PNG figures) and the raw numbers (DIR/results.json,
one CSV per study). Finished runs are cached in DIR/runs/ (one JSON per run, keyed by its
config and the implementation's source), so an interrupted command resumes where it stopped.
"""
import argparse
import importlib
import shlex
import sys
import tempfile
import time
from pathlib import Path

import torch

from grader.submission import SubmissionError, unpack

from . import report
from .common import Impl
from .presets import preset
from .runner import Cache, default_jobs, run_all

STUDIES = ("positional", "norms", "dropout", "attention_patterns", "cost")
REPO = Path(__file__).resolve().parents[1]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="grader experiments", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--impl", default="exercises",
                   help="solutions, exercises (default) or the path of a submission directory or zip")
    p.add_argument("--quick", action="store_true", help="smoke preset (under a minute on 2 cores)")
    p.add_argument("--seeds", type=int, help="seeds per configuration (default: the preset's)")
    p.add_argument("--out", default="experiment-results", help="output folder (default: experiment-results/)")
    p.add_argument("--report", help="where report.md goes (default: OUT/report.md)")
    p.add_argument("--only", nargs="+", choices=STUDIES, help="run only these studies")
    p.add_argument("--jobs", type=int, default=default_jobs(),
                   help="worker processes, one thread each (default: one per core)")
    return p


def _directory(impl: str, scratch: Path) -> Path:
    """The implementation's folder: an existing path, or solutions/exercises of this repo."""
    path = Path(impl)
    if not path.exists() and impl in ("solutions", "exercises") and (REPO / impl).is_dir():
        path = REPO / impl
    return unpack(path, scratch)


def _key(study) -> str:
    """A study module's key in the presets and the report: its own name (e.g. "norms")."""
    return study.__name__.rsplit(".", 1)[1]


def _command(args: argparse.Namespace) -> str:
    words = ["grader", "experiments", "--impl", args.impl] + (["--quick"] if args.quick else [])
    words += (["--seeds", str(args.seeds)] if args.seeds else []) + ["--out", args.out]
    words += ["--report", args.report] if args.report else []
    words += ["--only", *args.only] if args.only else []
    return shlex.join(words)


def run(args: argparse.Namespace) -> int:
    """Run the studies; 0 when the report was written (stubbed exercises are skipped, not failures),
    1 when some run raised an error, 2 when the implementation could not be loaded."""
    start = time.perf_counter()
    config = preset("quick" if args.quick else "full", args.seeds)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        try:
            impl = Impl(_directory(args.impl, Path(scratch)))
        except (SubmissionError, SyntaxError, ImportError) as exc:
            print(f"error: cannot load implementation {args.impl!r}: {type(exc).__name__}: {exc}",
                  file=sys.stderr)
            return 2
        studies = [importlib.import_module(f"{__package__}.{name}") for name in (args.only or STUDIES)]
        planned = [(study, study.runs(config[_key(study)])) for study in studies]
        flat = [r for _, rs in planned for r in rs]
        print(f"grader experiments: {len(flat)} runs on {impl.directory} "
              f"({'quick' if args.quick else 'full'} preset, {args.jobs} worker(s))", file=sys.stderr)
        try:
            outcomes = run_all(flat, impl, Cache(out / "runs", impl.digest), jobs=args.jobs)
        except KeyboardInterrupt:
            print(f"\ninterrupted: finished runs are cached in {out / 'runs'}; "
                  "rerun the same command to resume", file=sys.stderr)
            return 130
    sections, i = [], 0
    for study, rs in planned:
        pairs = list(zip(rs, outcomes[i:i + len(rs)], strict=True))
        sections.append(study.section(config[_key(study)], pairs, out))
        i += len(rs)
    cached = sum(o["cached"] for o in outcomes)
    cpu = sum(o.get("cpu_seconds", 0.0) for o in outcomes) / 60
    header = [
        f"- Implementation: `{args.impl}` (source sha256 `{impl.digest[:12]}`); torch {torch.__version__}, "
        f"one thread per run.",
        f"- Preset: {'quick' if args.quick else 'full'}; reproduce with `{_command(args)}`.",
        f"- {len(flat)} runs ({cached} reused from the cache of an earlier invocation); "
        f"CPU time summed over runs {cpu:.1f} min (so at least {cpu / 2:.1f} min of wall time "
        f"with 2 workers); this invocation took {(time.perf_counter() - start) / 60:.1f} min "
        f"with {args.jobs} worker(s).",
    ]
    report_path = Path(args.report) if args.report else out / "report.md"
    report.write(sections, out, report_path, header)
    for s in sections:
        for message in s.skipped:
            print(f"{s.key}: skipped: {message}", file=sys.stderr)
        for message in s.errors:
            print(f"{s.key}: error: {message}", file=sys.stderr)
    print(f"wrote {report_path}", file=sys.stderr)
    return 1 if any(s.errors for s in sections) else 0


def main(argv: list[str] | None = None) -> int:
    """`grader experiments ARGS` (the grader.commands entry point), or `python -m experiments.cli ARGS`."""
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
