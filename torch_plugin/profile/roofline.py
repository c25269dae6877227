"""The roofline plot of a profiled block (PNG, with matplotlib's Agg backend).

One point per (kernel, dtype): arithmetic intensity against achieved FLOP/s over the report's op
rows, sized by time, under the chip's matrix and vector engine ceilings (per dtype) and its HBM
bandwidth. Leaves out host rows and rows without flops or bytes (copies), and any interactive
display; matplotlib is imported only when a plot is drawn.
"""
from __future__ import annotations

from runtime import report as device_report
from torch_plugin.profile.report import ProfileReport


def save_roofline(report: ProfileReport, config, path) -> None:
    """Draws the kernels of ``report`` against the compute and HBM ceilings of ``config`` into ``path`` (PNG)."""
    try:
        import matplotlib
    except ImportError as err:
        raise RuntimeError("save_roofline() needs matplotlib (pip install matplotlib; the Makefile's install "
                           "target installs it)") from err
    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    points: dict[tuple, list] = {}  # (kernel, dtype) -> [flops, bytes, seconds]
    for row in report.ops:
        if row.bound == "host" or row.time_s <= 0 or row.flops <= 0 or row.bytes <= 0:
            continue
        p = points.setdefault((row.kernel, row.dtype), [0.0, 0.0, 0.0])
        p[0] += row.flops
        p[1] += row.bytes
        p[2] += row.time_s
    fig = Figure(figsize=(9, 6))
    ax = fig.add_subplot()
    dtypes = sorted({dtype for _, dtype in points}) or [None]
    peaks = {d: device_report.engine_peaks(config, d) for d in dtypes}
    bandwidth = peaks[dtypes[0]]["hbm_bytes_per_s"]
    intensities = [f / b for f, b, _ in points.values()] or [1.0]
    lo, hi = min(intensities + [0.1]) / 4, max(intensities + [1e3]) * 4
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    seen = set()
    for dtype, p in peaks.items():
        for key, label, style in (("matrix_flops", "matrix", "-"), ("vector_flops", "vector", "--")):
            peak = p[key]
            if (key, peak) in seen:
                continue
            seen.add((key, peak))
            ax.plot(xs, [min(peak, bandwidth * x) for x in xs], style,
                    label=f"{label} engines {peak / 1e12:.2f} TFLOP/s" + (f" ({dtype})" if dtype else ""))
    ax.plot(xs, [bandwidth * x for x in xs], ":", color="grey", label=f"HBM {bandwidth / 1e9:.0f} GB/s")
    total = sum(s for _, _, s in points.values()) or 1.0
    ranked = sorted(points.items(), key=lambda kv: -kv[1][2])
    for rank, ((kernel, dtype), (flops, nbytes, seconds)) in enumerate(ranked):
        x, y = flops / nbytes, flops / seconds
        ax.scatter([x], [y], s=20 + 400 * seconds / total, alpha=0.7)
        if rank < 12:
            ax.annotate(f"{kernel}" + (f" {dtype}" if dtype else ""), (x, y), fontsize=7,
                        xytext=(4, 4), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    top = max(p[key] for p in peaks.values() for key in ("matrix_flops", "vector_flops"))
    ax.set_ylim(top=top * 3)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved FLOP/s")
    skipped = sum(1 for row in report.ops if row.bound != "host" and row.flops <= 0)
    ax.set_title(f"Roofline: {config.device.name} (preset {config.name}); {len(points)} kernels"
                 + (f", {skipped} op rows without flops (copies) not shown" if skipped else ""), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.savefig(path, dpi=110, bbox_inches="tight")
