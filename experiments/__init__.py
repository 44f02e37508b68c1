"""`grader experiments`: the lab's studies, run on any implementation that follows docs/spec.md.

One module per study (positional, norms, dropout, attention_patterns, cost); each lists its
runs for a preset and turns their results into a report section (tables and figures with their
spread over seeds). runner.py executes runs (seeded, cached one JSON file per run, resumable, with
a progress bar), plots.py gives the figures one look, report.py writes the markdown, JSON and CSV,
notebook.py the same report as a notebook and one self-contained HTML page, cli.py is the command
line.
"""
