"""The report as a notebook (nbformat) and as one self-contained HTML file (nbconvert).

The notebook holds the report's markdown, one cell per part, with the figures linked next to it
(open it in Jupyter from its folder). The HTML embeds every figure as a data URI and inlines its
CSS; its template drops the scripts nbconvert's "lab" template loads from a CDN (require.js,
MathJax, mermaid), which a report of tables and images does not need, so the file opens offline.
"""
from pathlib import Path

import nbformat
from nbformat.v4 import new_markdown_cell, new_notebook

from .runner import write_atomic

# nbconvert's "lab" template without its CDN scripts: the page needs no JavaScript.
OFFLINE_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


def build(parts: list[str], title: str) -> nbformat.NotebookNode:
    """A notebook of markdown cells, one per part of the report."""
    return new_notebook(cells=[new_markdown_cell(part) for part in parts], metadata={"title": title})


def write(notebook: nbformat.NotebookNode, path: Path) -> None:
    """Save the notebook (validated by nbformat) atomically."""
    write_atomic(path, nbformat.writes(notebook))


def write_html(notebook: nbformat.NotebookNode, path: Path) -> None:
    """Export to one HTML file with the figures, whose links are relative to path's folder, embedded.

    Raises ImportError when nbconvert is not installed.
    """
    import jinja2
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(extra_loaders=[jinja2.DictLoader({"offline.html.j2": OFFLINE_TEMPLATE})],
                            template_file="offline.html.j2", embed_images=True)
    html, _ = exporter.from_notebook_node(notebook, resources={"metadata": {"path": str(path.parent),
                                                                            "name": path.stem}})
    write_atomic(path, html)
