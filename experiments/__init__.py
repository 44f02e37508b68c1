"""`grader experiments`: the lab's studies, run on any implementation that follows docs/spec.md.

One module per study (positional, norms, dropout, attention_patterns, cost); each lists its
runs for a preset and turns their results into a report section. runner.py executes runs
(seeded, cached one JSON file per run, resumable, with a progress bar), report.py writes the
markdown, JSON and CSV, cli.py is the command line.
"""
