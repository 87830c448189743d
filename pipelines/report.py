"""``offsets-lakehouse report``: a static HTML activity page of the lakehouse, offline.

Each plot is one small aggregate query on the gold (or silver) tables — never a collect of a big
table — drawn by matplotlib into an SVG that is inlined into ``index.html`` (no scripts, no CDN:
the page opens from a file system or an artifact store). Under each plot a table lists the numbers
it draws, so a reader (or a test) can read them exactly.

Every plot sits in ``<section data-plot="NAME">``; the drawn data marks (bars, lines) are SVG
groups with ids ``mark-NAME-i``; a plot with no data says why instead of drawing an empty frame.
"""

from __future__ import annotations

import html
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

from pipelines.errors import OffsetsLakehouseError
from pipelines.runner import Context
from pipelines.runtime import files, lake

DAY_MS = 86_400_000
TOP_GROUPS = 3  # offset progress without --group: the groups with the most commits
MAX_SERIES = 12  # lines per plot; more are unreadable
LAG_TIME_COLUMNS = ("valid_from_timestamp", "timestamp", "as_of", "observed_at")  # gold.lag_history's, by name
LAG_PLACEHOLDER = "no end offsets known: see docs/lag.md"


class ReportError(OffsetsLakehouseError):
    """The lakehouse has no gold tables to report on (exit code 1)."""


@dataclass
class Plot:
    """One section of the page: a bar chart (``bars``) or lines over time (``series``)."""

    name: str
    title: str
    x_label: str
    y_label: str
    bars: list[tuple[str, float]] = field(default_factory=list)
    series: dict[str, list[tuple[datetime, float]]] = field(default_factory=dict)
    note: str = ""  # shown instead of a plot when there is no data
    summary: dict[str, Any] = field(default_factory=dict)  # data-* attributes of the section

    @property
    def empty(self) -> bool:
        return not self.bars and not any(self.series.values())


# -- the queries ----------------------------------------------------------------------------------


def _where(group: str | None, prefix: str = "WHERE") -> str:
    return f"{prefix} group_id = {_sql_str(group)}" if group else ""


def _sql_str(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _exists(ctx: Context, layer: str, table: str) -> bool:
    """On storage, not by name: a name may still point at another lakehouse in a long session."""
    return lake.exists(ctx.spark, ctx.tables.path(layer, table))


def cadence(ctx: Context, group: str | None) -> Plot:
    """Commit requests per day (per hour when the history spans at most two days)."""
    name = ctx.tables.name("gold", "commit_cadence")
    span = ctx.spark.sql(f"SELECT min(hour) AS lo, max(hour) AS hi FROM {name} {_where(group)}").collect()[0]
    hourly = span["lo"] is not None and (span["hi"] - span["lo"]).total_seconds() <= 2 * 86400
    bucket = "hour" if hourly else "day"
    key = "hour" if hourly else "to_date(hour)"
    rows = ctx.spark.sql(
        f"SELECT {key} AS bucket, sum(commit_batches) AS commits FROM {name} "
        f"WHERE hour IS NOT NULL {_where(group, 'AND')} GROUP BY 1 ORDER BY 1"
    ).collect()
    bars = [(_label(r["bucket"]), int(r["commits"])) for r in rows]
    return Plot(
        "cadence",
        f"Commit cadence: commit requests per {bucket}" + (f" of {group}" if group else ""),
        f"{bucket} (UTC, log time)",
        "commits",
        bars=bars,
        note="" if bars else "no commits with a log time",
        summary={"bucket": bucket, "total": sum(n for _, n in bars)},
    )


def offset_progress(ctx: Context, group: str | None) -> Plot:
    """Committed offset over log time per topic partition: of ``group``, else of the busiest groups.
    The last offset of each hour is drawn, so a long history stays a small result."""
    history = ctx.tables.name("gold", "offset_history")
    if group:
        groups = [group]
    else:
        top = ctx.spark.sql(
            f"SELECT group_id FROM {history} WHERE NOT deleted AND valid_from_timestamp IS NOT NULL "
            f"GROUP BY group_id ORDER BY count(*) DESC, group_id LIMIT {TOP_GROUPS}"
        ).collect()
        groups = [r["group_id"] for r in top]
    series: dict[str, list[tuple[datetime, float]]] = {}
    if groups:
        names = ", ".join(_sql_str(g) for g in groups)
        keys = ctx.spark.sql(
            f"SELECT group_id, topic, partition FROM {history} WHERE group_id IN ({names}) AND NOT deleted "
            f"AND valid_from_timestamp IS NOT NULL GROUP BY 1, 2, 3 ORDER BY count(*) DESC, 1, 2, 3 LIMIT {MAX_SERIES}"
        ).collect()
        if keys:
            chosen = " OR ".join(
                f"(group_id = {_sql_str(k['group_id'])} AND topic = {_sql_str(k['topic'])} "
                f"AND partition = {k['partition']})"
                for k in keys
            )
            rows = ctx.spark.sql(
                f"SELECT group_id, topic, partition, valid_from_timestamp DIV 3600000 * 3600000 AS hour, "
                f"max_by(committed_offset, valid_from_offset) AS committed_offset FROM {history} "
                f"WHERE NOT deleted AND valid_from_timestamp IS NOT NULL AND ({chosen}) "
                "GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4"
            ).collect()
            for r in rows:
                label = f"{r['topic']}-{r['partition']}" if group else f"{r['group_id']} {r['topic']}-{r['partition']}"
                series.setdefault(label, []).append((_utc(r["hour"]), float(r["committed_offset"])))
    return Plot(
        "offset-progress",
        "Offset progress per topic partition" + (f" of {group}" if group else f" (top {len(groups)} groups)"),
        "log time (UTC)",
        "committed offset",
        series=series,
        note="" if series else "no committed offsets with a log time",
        summary={"series": len(series), "groups": ",".join(groups)},
    )


def lag(ctx: Context, group: str | None) -> Plot:
    """Total lag over time from gold.lag_history when that table exists (docs/lag.md), else a note:
    __consumer_offsets holds no end offsets, so lag cannot come from it alone."""
    plot = Plot("lag", "Consumer lag over time", "log time (UTC)", "lag (messages)", note=LAG_PLACEHOLDER)
    if "lag_history" not in ctx.tables.specs.get("gold", {}) or not _exists(ctx, "gold", "lag_history"):
        return plot
    name = ctx.tables.name("gold", "lag_history")
    columns = {f.name: f.dataType.simpleString() for f in ctx.spark.table(name).schema.fields}
    time_col = next((c for c in LAG_TIME_COLUMNS if c in columns), None)
    lag_col = next((c for c in ("lag", "total_lag") if c in columns), None)
    if time_col is None or lag_col is None or "group_id" not in columns:
        plot.note = f"{name} has no (group_id, time, lag) columns this report knows: see docs/lag.md"
        return plot
    when = f"timestamp_millis({time_col})" if columns[time_col] == "bigint" else time_col
    rows = ctx.spark.sql(
        f"SELECT group_id, date_trunc('HOUR', {when}) AS hour, max({lag_col}) AS lag FROM {name} "
        f"WHERE {time_col} IS NOT NULL {_where(group, 'AND')} GROUP BY 1, 2 ORDER BY 1, 2"
    ).collect()
    for r in rows:
        plot.series.setdefault(r["group_id"], []).append((_utc(r["hour"]), float(r["lag"] or 0)))
    plot.series = dict(list(plot.series.items())[:MAX_SERIES])
    plot.note = "" if plot.series else f"{name} holds no lag for this selection"
    return plot


def rebalances(ctx: Context, group: str | None) -> Plot:
    name = ctx.tables.name("gold", "rebalances_per_day")
    rows = ctx.spark.sql(
        f"SELECT day, sum(rebalances) AS n FROM {name} WHERE day IS NOT NULL {_where(group, 'AND')} "
        "GROUP BY day ORDER BY day"
    ).collect()
    bars = [(_label(r["day"]), int(r["n"])) for r in rows]
    return Plot(
        "rebalances",
        "Rebalances per day (classic groups)" + (f" of {group}" if group else ""),
        "day (UTC, log time)",
        "rebalances",
        bars=bars,
        note="" if bars else "no classic group rebalances with a log time",
        summary={"total": sum(n for _, n in bars)},
    )


def coordinator_load(ctx: Context) -> Plot:
    """Records per __consumer_offsets partition (one group coordinator each), all record kinds."""
    name = ctx.tables.name("silver", "version_inventory")
    rows = ctx.spark.sql(f"SELECT offsets_partition, sum(records) AS n FROM {name} GROUP BY 1 ORDER BY 1").collect()
    bars = [(str(r["offsets_partition"]), int(r["n"])) for r in rows]
    return Plot(
        "coordinator-load",
        "Coordinator load: records per __consumer_offsets partition",
        "__consumer_offsets partition",
        "records",
        bars=bars,
        note="" if bars else "silver holds no records",
        summary={"total": sum(n for _, n in bars)},
    )


def _label(value: Any) -> str:
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:00")
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def _utc(value: Any) -> datetime:
    """A Spark timestamp (naive, in the Python process's zone) or epoch ms, as a UTC datetime."""
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc)
    return datetime.fromtimestamp(value / 1000, tz=timezone.utc)


# -- drawing ----------------------------------------------------------------------------------------


def render_svg(plot: Plot) -> str:
    """The plot as an inline <svg> element; data marks get ids ``mark-<plot>-<i>``."""
    from matplotlib import rc_context

    # text as <text> (no glyph definitions), and ids salted per plot: several SVGs share one page
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": plot.name}):
        return _draw(plot)


def _draw(plot: Plot) -> str:
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(9, 3.4), layout="constrained")
    ax = fig.add_subplot()
    if plot.bars:
        labels = [x for x, _ in plot.bars]
        bars = ax.bar(range(len(labels)), [y for _, y in plot.bars], color="#3b6ea8")
        for i, bar in enumerate(bars):
            bar.set_gid(f"mark-{plot.name}-{i}")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts: no 2.5 commits
        step = max(1, len(labels) // 12)
        ax.set_xticks(range(0, len(labels), step), labels[::step], rotation=30, ha="right", fontsize=8)
    else:
        for i, (label, points) in enumerate(plot.series.items()):
            (line,) = ax.plot([t for t, _ in points], [v for _, v in points], marker=".", label=label)
            line.set_gid(f"mark-{plot.name}-{i}")
        locator = AutoDateLocator()
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
        ax.legend(fontsize=7, loc="upper left", ncols=2)
    ax.set_xlabel(plot.x_label)
    ax.set_ylabel(plot.y_label)
    ax.grid(axis="y", alpha=0.3)
    buf = io.StringIO()
    # no metadata block: no date (the same data draws the same bytes), no RDF namespaces
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    svg = buf.getvalue()
    return svg[svg.index("<svg") :]  # inline: without the XML declaration and doctype


def _table(plot: Plot) -> str:
    if plot.bars:
        head = f"<tr><th>{html.escape(plot.x_label)}</th><th>{html.escape(plot.y_label)}</th></tr>"
        body = "".join(
            f'<tr data-x="{html.escape(x)}" data-y="{y:g}"><td>{html.escape(x)}</td><td>{y:g}</td></tr>'
            for x, y in plot.bars
        )
    else:
        head = "<tr><th>series</th><th>points</th><th>first</th><th>last</th><th>last value</th></tr>"
        body = "".join(
            f'<tr data-series="{html.escape(s)}" data-points="{len(p)}"><td>{html.escape(s)}</td><td>{len(p)}</td>'
            f"<td>{p[0][0]:%Y-%m-%d %H:%M}</td><td>{p[-1][0]:%Y-%m-%d %H:%M}</td><td>{p[-1][1]:g}</td></tr>"
            for s, p in plot.series.items()
        )
    return f'<details><summary>numbers</summary><table class="data">{head}{body}</table></details>'


def section(plot: Plot) -> str:
    attrs = "".join(f' data-{k}="{html.escape(str(v))}"' for k, v in plot.summary.items())
    inner = (
        f'<p class="note">{html.escape(plot.note)}</p>'
        if plot.empty
        else f'<div class="plot">{render_svg(plot)}</div>{_table(plot)}'
    )
    state = "empty" if plot.empty else "drawn"
    return (
        f'<section data-plot="{plot.name}" data-state="{state}"{attrs}>'
        f"<h2>{html.escape(plot.title)}</h2>{inner}</section>"
    )


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 960px; color: #222; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.1rem; margin-top: 2rem; }
.meta { color: #666; font-size: 0.9rem; } .note { color: #8a5a00; background: #fff6e0; padding: 0.6rem; }
table.data { border-collapse: collapse; font-size: 0.8rem; } table.data td, table.data th { padding: 2px 8px; }
.plot svg { width: 100%; height: auto; }
"""


def page(plots: Sequence[Plot], root: str, group: str | None) -> str:
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    scope = f"group {html.escape(group)}" if group else "all groups"
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        "<title>offsets-lakehouse activity report</title>"
        f"<style>{STYLE}</style></head><body>"
        "<h1>offsets-lakehouse activity report</h1>"
        f'<p class="meta">Lakehouse {html.escape(root)}, {scope}; generated {generated}. '
        "Times are log time (record timestamps, UTC).</p>" + "".join(section(p) for p in plots) + "</body></html>\n"
    )


def build_report(ctx: Context, out: Path | str, group: str | None = None) -> str:
    """Query the lakehouse, draw the plots and write ``out/index.html``; returns where it is.
    ``out`` may be a directory on an object store (``s3://…``, e.g. ``<root>/report``)."""
    ctx.tables.register_existing(["gold"])  # its plots read gold's views, and silver's inventory
    if _exists(ctx, "silver", "version_inventory"):
        ctx.tables.register("silver", "version_inventory")
    needed = [("gold", "offset_history"), ("gold", "group_generations"), ("silver", "version_inventory")]
    missing = [ctx.tables.name(layer, t) for layer, t in needed if not _exists(ctx, layer, t)]
    if missing:
        raise ReportError(f"no {', '.join(missing)} in the lakehouse at {ctx.root}: run a job with gold first")
    plots = [
        cadence(ctx, group),
        offset_progress(ctx, group),
        lag(ctx, group),
        rebalances(ctx, group),
        coordinator_load(ctx),
    ]
    text = page(plots, str(ctx.root), group)
    if isinstance(out, str) and "://" in out:
        index = f"{out.rstrip('/')}/index.html"
        files.write_bytes(index, text.encode())
        return index
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "index.html").write_text(text)
    return str(out / "index.html")
