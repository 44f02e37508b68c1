"""`grader experiments` (a plugin command of the grader CLI): run the lab's studies on an \
implementation and write a report.

    grader experiments [--impl solutions|exercises|PATH] [--quick] [--seeds N] [--out DIR]

Writes DIR/report.md (tables, findings, PNG figures), the same report as a notebook
(DIR/report.ipynb) and as one self-contained web page (DIR/report.html), and the raw numbers
(DIR/results.json, one CSV per study). Every table and figure names whose code it measures.
Finished runs are cached in DIR/runs/ (one JSON per run, keyed by its config and the
implementation's source), so an interrupted command resumes where it stopped.
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
from .preflight import missing
from .presets import preset
from .report import Output
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


def whose(impl: str, directory: Path, digest: str) -> str:
    """Whose code a report measures, as every table and figure says it: the reference, or the
    implementation as given on the command line, with the start of its source's sha256."""
    if directory.resolve() == (REPO / "solutions").resolve():
        return "reference solutions"
    return f"{Path(impl).name or impl} (sha256 {digest[:8]})"


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
    """Run the studies; 0 when the report was written, 1 when some run raised an error, 2 when the
    implementation could not be loaded or a study calls a part still left as a stub (before any run)."""
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
        names = args.only or list(STUDIES)
        blocked = missing(impl, names)  # before any run: a study that would only be skipped is not run
        if len(blocked) == len(names):
            _say_what_is_missing(blocked)
            return 2
        studies = [importlib.import_module(f"{__package__}.{name}") for name in names]
        planned = [(study, study.runs(config[_key(study)])) for study in studies]
        flat = [r for study, rs in planned if _key(study) not in blocked for r in rs]
        print(f"grader experiments: {len(flat)} runs on {impl.directory} "
              f"({'quick' if args.quick else 'full'} preset, {args.jobs} worker(s))", file=sys.stderr)
        try:
            done = iter(run_all(flat, impl, Cache(out / "runs", impl.digest), jobs=args.jobs))
            outcomes = [_not_run(blocked[_key(study)]) if _key(study) in blocked else next(done)
                        for study, rs in planned for _ in rs]
        except KeyboardInterrupt:
            print(f"\ninterrupted: finished runs are cached in {out / 'runs'}; "
                  "rerun the same command to resume", file=sys.stderr)
            return 130
    who = whose(args.impl, impl.directory, impl.digest)
    sections, i = [], 0
    for study, rs in planned:
        pairs = list(zip(rs, outcomes[i:i + len(rs)], strict=True))
        section = study.section(config[_key(study)], pairs, Output(out, who))
        section.number = STUDIES.index(_key(study)) + 1  # the same number whatever --only selects
        sections.append(section)
        i += len(rs)
    report_path = Path(args.report) if args.report else out / "report.md"
    written, problems = report.write(sections, Output(out, who), report_path,
                                     _header(args, impl, who, planned, outcomes, time.perf_counter() - start))
    for s in sections:
        for message in s.skipped:
            print(f"{s.key}: skipped: {message}", file=sys.stderr)
        for message in s.errors:
            print(f"{s.key}: error: {message}", file=sys.stderr)
    for problem in problems:
        print(f"note: {problem} (the report needs nbconvert: pip install nbconvert)", file=sys.stderr)
    print("wrote " + ", ".join(str(path) for path in written.values()), file=sys.stderr)
    return 1 if any(s.errors for s in sections) else 0


def _say_what_is_missing(blocked: dict[str, list[str]]) -> None:
    print("grader experiments: nothing was run: every study calls parts that are not written yet",
          file=sys.stderr)
    for study, lines in blocked.items():
        print(f"  {study}: " + "; ".join(lines), file=sys.stderr)


def _not_run(stubs: list[str]) -> dict:
    """The outcome of each run of a study that calls a stub: skipped, without running."""
    return {"status": "skipped", "message": "; ".join(stubs), "cached": False}


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def _header(args: argparse.Namespace, impl: Impl, who: str, planned: list, outcomes: list[dict],
            seconds: float) -> list[str]:
    """The report's first lines: whose code, how to reproduce it, and the measured times."""
    cached = sum(o["cached"] for o in outcomes)
    cpu, i = {}, 0
    for study, rs in planned:
        cpu[_key(study)] = sum(o.get("cpu_seconds", 0.0) for o in outcomes[i:i + len(rs)])
        i += len(rs)
    total = sum(cpu.values())
    return [
        f"- Code: **{who}** (`{args.impl}`, source sha256 `{impl.digest[:12]}`); torch {torch.__version__}, "
        f"one thread per run.",
        f"- Preset: {'quick' if args.quick else 'full'}; reproduce with `{_command(args)}`.",
        f"- {len(outcomes)} runs ({cached} reused from the cache of an earlier invocation). CPU time of the "
        f"runs, as each run measured it: {_duration(total)} ("
        + ", ".join(f"{key} {_duration(t)}" for key, t in cpu.items())
        + f"), so at least {_duration(total / 2)} of wall time with 2 workers. This invocation took "
        f"{_duration(seconds)} of wall time with {args.jobs} worker(s).",
    ]


def main(argv: list[str] | None = None) -> int:
    """`grader experiments ARGS` (the grader.commands entry point), or `python -m experiments.cli ARGS`."""
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
