"""The figures' look, shared by every study: matplotlib (Agg backend, files only), one style (set
on import), one colour per positional encoding, per norm placement, per dropout rate and per model
depth (the same in every figure), mean lines with a ±1 std band over seeds, legends outside the axes.

Figures are WIDTH inches at DPI, so at least 1000 px wide; constrained layout and a tight bounding
box keep every label inside the image.
"""
import math
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")  # files only, no display needed (CI, servers)
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

from .common import mean_std  # noqa: E402

DPI = 100
WIDTH = 11.0  # inches: 1100 px, readable when a browser or GitHub scales it to its column
STYLE = {"font.size": 11, "axes.titlesize": 11, "axes.labelsize": 11, "legend.fontsize": 10,
         "xtick.labelsize": 10, "ytick.labelsize": 10, "axes.spines.top": False, "axes.spines.right": False,
         "axes.grid": True, "grid.alpha": 0.3, "lines.linewidth": 1.8, "lines.markersize": 5}

ENCODING_COLORS = {"sinusoidal": "tab:blue", "learned": "tab:orange", "rope": "tab:green",
                   "alibi": "tab:red", "none": "tab:gray"}
NORM_COLORS = {"pre": "tab:purple", "post": "tab:brown"}
LAYER_COLORS = {1: "tab:gray", 2: "tab:cyan"}
BAND_ALPHA = 0.2
plt.rcParams.update(STYLE)  # this process draws only the report's figures


def rate_color(rate: float, rates: Sequence[float]) -> tuple:
    """A dropout rate's colour: darker for less dropout, on one sequential scale."""
    ordered = sorted(rates)
    return plt.get_cmap("viridis")(0.85 * ordered.index(rate) / max(1, len(ordered) - 1))


def subplots(ncols: int = 1, nrows: int = 1, height: float = 3.6, width: float = WIDTH,
             **kwargs) -> tuple[Figure, list[list[Axes]]]:
    """A figure of nrows x ncols axes (always a 2-d list), in the house style and layout."""
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, height * nrows), squeeze=False,
                             layout="constrained", dpi=DPI, **kwargs)
    return fig, axes.tolist()


def band(ax: Axes, x: Sequence[float], runs: Sequence[Sequence[float]], *, color, label: str | None = None,
         **line) -> None:
    """The mean over runs (one curve per seed, aligned on x) as a line, ±1 std as a shaded band."""
    stats = [mean_std(list(column)) for column in zip(*runs, strict=True)]
    mean = [m for m, _ in stats]
    ax.plot(x, mean, color=color, label=label, **line)
    if len(runs) > 1:
        ax.fill_between(x, [m - s for m, s in stats], [m + s for m, s in stats], color=color,
                        alpha=BAND_ALPHA, lw=0)


def legend_below(fig: Figure, axes: Sequence[Axes], ncols: int | None = None) -> None:
    """One legend for the figure, under the axes (never over data), without repeated entries."""
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    if entries:
        fig.legend(entries.values(), entries.keys(), loc="outside lower center",
                   ncols=ncols or min(len(entries), 6), frameon=False)



def _plain(value: float, _position=None) -> str:
    return f"{value:g}"


def _plain_2_5(value: float, _position=None) -> str:
    """Minor ticks of a log axis: label 2 and 5 times a power of ten (0.2, 0.5, 2, 50...)."""
    return f"{value:g}" if value > 0 and round(value / 10 ** math.floor(math.log10(value))) in (2, 5) else ""


def log_y(ax: Axes) -> None:
    """A log y axis labelled in plain numbers (0.2, 0.5, 1, 2), not powers of ten."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    ax.yaxis.set_minor_formatter(FuncFormatter(_plain_2_5))


def integer_x(ax: Axes) -> None:
    """Whole-number ticks on the x axis (layer or block indices, steps)."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
