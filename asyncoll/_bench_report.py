"""asyncoll-bench's report: a row as the table prints it, the summary by mean
time, and the plot (asyncoll/bench.py runs the ranks and collects the rows)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def by_mean(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The summary: for each (ranks, collective, size), the systems from the
    fastest mean to the slowest, each other one with asyncoll's mean over its own."""
    cases: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for row in rows:
        cases.setdefault((row["ranks"], row["collective"], row["size"]), []).append(row)
    lines = ["# by mean time (us), fastest first; (Nx): asyncoll's mean over that system's"]
    for (ranks, collective, size), group in cases.items():
        ours = next((r["mean_us"] for r in group if r["system"] == "asyncoll"), None)
        ranked = sorted(group, key=lambda r: r["mean_us"])
        said = ", ".join(
            f"{r['system']} {r['mean_us']:.2f}" + (f" ({ours / r['mean_us']:.2f}x)"
                                                   if ours and r["mean_us"]
                                                   and r["system"] != "asyncoll" else "")
            for r in ranked)
        lines.append(f"# {ranks} ranks {collective} {size} B: {said}")
    return lines


def format_row(row: dict[str, Any]) -> str:
    return (f"{row['system']:>13} {row['ranks']:>5} {row['collective']:>14} {row['size']:>11} "
            f"{row['count']:>10} {row['type']:>6} {row['redop']:>5} {row['root']:>4} "
            f"{row['time_us']:>11.2f} {row['mean_us']:>11.2f} {row['algbw_GBps']:>8.4f} "
            f"{row['busbw_GBps']:>8.4f} "
            f"{row['wrong']:>6}")


def plot(rows: list[dict[str, Any]], path: str) -> None:
    try:
        import matplotlib  # type: ignore[import-not-found, unused-ignore]
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise SystemExit("asyncoll-bench: --plot needs matplotlib: pip install "
                         "'asyncoll[plot]'") from None
    panels = sorted({(row["collective"], row["ranks"]) for row in rows})
    systems = list(dict.fromkeys(row["system"] for row in rows))
    colours = {system: f"C{i}" for i, system in enumerate(systems)}
    figure, axes = plt.subplots(len(panels), 2, figsize=(11, 3.6 * len(panels)),
                                squeeze=False)
    for (bandwidth, latency), (collective, ranks) in zip(axes, panels):
        for system in systems:
            points = [row for row in rows if row["system"] == system
                      and row["collective"] == collective and row["ranks"] == ranks]
            if not points:
                continue
            sizes = [p["size"] for p in points]
            style = {"marker": "o", "label": system, "color": colours[system]}
            bandwidth.plot(sizes, [p["busbw_GBps"] for p in points], **style)
            latency.plot(sizes, [p["time_us"] for p in points], **style)
        for ax, what in ((bandwidth, "bus bandwidth (GB/s)"), (latency, "time (us)")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("size (bytes)")
            ax.set_ylabel(what)
            ax.set_title(f"{collective}, {ranks} ranks: {what}")
            ax.grid(True, which="both", alpha=0.3)
        latency.set_yscale("log")
        bandwidth.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
