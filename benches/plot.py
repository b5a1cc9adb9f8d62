#!/usr/bin/env python3
"""The benchmarks page's tables and figure, from the recorded runs.

The benchmarks append their figures to target/bench/<bench>.csv
(benches/support/record.rs); the rows worth keeping are copied to
docs/src/benchmarks/<bench>.csv. From those this script writes
docs/src/benchmarks/pin.svg (pin p50 and shared pool narrowed p50 against
live containers, one series per machine and hierarchy),
docs/src/benchmarks/noise.svg (switches per minute on the exclusive CPU by
class and set-up, a panel per machine and hierarchy),
docs/src/benchmarks/soak.svg (the daemon's RSS and open files through each
soak, tests/soak/) and
docs/src/benchmarks/runs.md (a table per benchmark, a row per run and
size; noise: a row per machine, hierarchy and set-up, medians over the
runs; soak: a row per run), which docs/src/benchmarks.md includes.

    benches/plot.py                     write pin.svg and runs.md
    benches/plot.py --check             exit 1 naming the file the CSV no longer gives
    benches/plot.py --add [--last] FILE...
                                        append FILE's rows to docs/src/benchmarks/,
                                        then write: FILE is a benchmark's CSV
                                        (target/bench/<bench>.csv, target/soak/soak-*.csv) or a VM test
                                        bed log (its BENCH-CSV| lines, rows of
                                        real_cgroup or noise, by their header,
                                        and its SOAK-CSV| lines, the soak's);
                                        --last keeps only FILE's
                                        newest run. Rows already there are skipped.

Python's standard library only; the output depends on the CSV alone.
A machine named "... qemu TCG ..." (as tests/vm/opt/bench.sh names the VM
test bed's guests) is emulated; the hierarchy "fake" is the daemon benchmark's
fake tree in tmpfs.
"""

import csv
import io
import math
import sys
from html import escape
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "src" / "benchmarks"
SVG = DATA / "pin.svg"
NOISE_SVG = DATA / "noise.svg"
SOAK_SVG = DATA / "soak.svg"
TABLE = DATA / "runs.md"
BENCHES = ("real_cgroup", "daemon", "planner", "allocator", "noise", "soak-summary", "soak-samples")
VM_PREFIX = "BENCH-CSV| "
# The soak's rows in a VM bed log: "SOAK-CSV|<bench>| <row>".
SOAK_PREFIX = "SOAK-CSV|"


def read_rows(bench):
    path = DATA / f"{bench}.csv"
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def number(text):
    """A cell as a float; None when empty."""
    return float(text) if text not in ("", None) else None


def emulated(machine):
    return "qemu TCG" in machine


# --- numbers as the page shows them -----------------------------------------


def fmt(x):
    """A time: two or three significant figures, thousands with commas."""
    if x is None:
        return "-"
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def pair(row, key):
    p50, p99 = number(row[f"{key}_p50_ms"]), number(row[f"{key}_p99_ms"])
    if p50 is None:
        return "-"
    return f"{fmt(p50)} / {fmt(p99)}"


def count(text):
    return f"{int(text):,}" if text else "-"


def when(date):
    """2026-11-27T12:41:05Z as 2026-11-27 12:41."""
    return date.replace("T", " ")[:16]


# --- runs.md ----------------------------------------------------------------


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in r) + " |" for r in rows]
    return out


def section(anchor, lines):
    return [f"<!-- ANCHOR: {anchor} -->", *lines, f"<!-- ANCHOR_END: {anchor} -->", ""]


def by_run(rows):
    return sorted(
        rows,
        key=lambda r: (r["machine"], r["hierarchy"], r["date"], int(r["live"])),
    )


def cgroupfs_table(rows):
    if not rows:
        return ["No run recorded."]
    header = ["machine", "date (UTC)", "hierarchy", "CPUs", "kernel", "live", "rounds",
              "pin", "pin under churn", "narrowed", "released", "kernel floor",
              "full reconcile (cgroups)", "RSS peak (MB)"]
    body = []
    for r in by_run(rows):
        rec = number(r["reconcile_p50_ms"])
        body.append([
            r["machine"], when(r["date"]),
            r["hierarchy"] + (", emulated" if emulated(r["machine"]) else ""),
            r["cpus"], r["kernel"],
            count(r["live"]), r["samples"], pair(r, "pin"), pair(r, "churn"),
            pair(r, "narrowed"), pair(r, "released"), fmt(number(r["floor_p50_ms"])),
            f"{fmt(rec)} ({count(r['cgroups'])})" if rec is not None else "-",
            r["rss_mb"],
        ])
    return table(header, body)


def fake_table(rows):
    if not rows:
        return ["No run recorded."]
    header = ["machine", "date (UTC)", "CPUs", "kernel", "live", "samples", "pin",
              "pool shrunk", "regrown", "full reconcile (cgroups)", "RSS peak (MB)"]
    body = []
    for r in by_run(rows):
        rec = number(r["reconcile_p50_ms"])
        body.append([
            r["machine"], when(r["date"]), r["cpus"], r["kernel"], count(r["live"]),
            r["samples"], pair(r, "pin"), pair(r, "narrowed"), pair(r, "released"),
            f"{fmt(rec)} ({count(r['cgroups'])})" if rec is not None else "-",
            r["rss_mb"],
        ])
    return table(header, body)


def param_key(p):
    return (0, int(p), "") if p.isdigit() else (1, 0, p)


def criterion_table(rows, param_name):
    """A row per run and case, a column per parameter: criterion's median."""
    if not rows:
        return ["No run recorded."]
    params = sorted({r["param"] for r in rows}, key=param_key)
    runs = {}
    for r in rows:
        key = (r["machine"], r["date"], r["group"], r["case"])
        runs.setdefault(key, {})[r["param"]] = number(r["median_us"])
    header = ["machine", "date (UTC)", "case"] + [f"{param_name} {count(p) if p.isdigit() else p}" for p in params]
    body = []
    for (machine, date, _group, case), medians in sorted(runs.items()):
        body.append([machine, when(date), case] + [fmt(medians.get(p)) for p in params])
    return table(header, body)


def runs_md(data):
    real = data["real_cgroup"]
    lines = [
        "<!-- Written by benches/plot.py from the CSV files beside it: do not edit. -->",
        "",
    ]
    lines += section("cgroupfs", cgroupfs_table(real))
    lines += section("fake", fake_table(data["daemon"]))
    lines += section("planner", criterion_table(data["planner"], "live"))
    lines += section("allocator", criterion_table(data["allocator"], "CPUs"))
    lines += section("noise", noise_table(data["noise"]))
    lines += section("soak", soak_table(data["soak-summary"]))
    return "\n".join(lines)


def soak_table(rows):
    """A row per soak run: what it ran, what it found, what it survived."""
    kinds = [("kills", "SIGKILL"), ("reloads", "SIGHUP"), ("corrupt_states", "state corrupt"),
             ("deleted_states", "state deleted"), ("paths_removed", "path removed"),
             ("deleted_under_write", "deleted under a write"), ("runs_killed", "run client killed"),
             ("hotplugs", "hot-plug"), ("daemon_reloads", "daemon-reload")]
    out = []
    for r in sorted(rows, key=lambda r: (r["machine"], r["date"])):
        mib = lambda k: f"{int(r[k]) / 1024:.1f}" if r[k] else "-"
        faults = ", ".join(f"{name} {count(r[k])}" for k, name in kinds if r.get(k, "") not in ("", "0"))
        p50, p99 = number(r["recovery_p50_ms"]), number(r["recovery_p99_ms"])
        out.append([
            r["machine"], when(r["date"]), r["hierarchy"], r["cpus"], r["kernel"],
            f"{int(r['seconds']) / 60:.0f} min", count(r["containers"]), count(r["samples"]),
            f"{r['overlaps']} / {r['lost_pins']} / {r['leaks']}", faults or "-",
            count(r["resizes"]), "-" if p50 is None else f"{fmt(p50)} / {fmt(p99)}",
            f"{mib('rss_first_kib')} → {mib('rss_last_kib')} (max {mib('rss_max_kib')})",
            r["seed"], r["result"],
        ])
    header = ["machine", "date (UTC)", "hierarchy", "CPUs", "kernel", "ran", "containers",
              "samples", "overlaps / lost pins / leaks", "faults survived", "resizes",
              "recovery after SIGKILL p50 / p99 (ms)", "RSS first → last (MiB)", "seed", "result"]
    return table(header, out)


# --- pin.svg ----------------------------------------------------------------

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
           "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"]
# A hierarchy's line and marker: v1 solid and round, v2 dashed and square,
# the fake tree dotted and triangular.
STYLES = {"v1": ("", "circle"), "v2": ("7 4", "square"), "fake": ("2 3", "triangle")}
PANEL_W, PANEL_H = 380, 260
LEFT, TOP, GAP, RIGHT = 70, 40, 90, 30
LEGEND_ROW = 18


def decades(values):
    lo = math.floor(math.log10(min(values)))
    hi = math.ceil(math.log10(max(values)))
    return lo, max(hi, lo + 1)


def tick_label(exp):
    v = 10.0 ** exp
    return f"{v:,.0f}" if exp >= 0 else f"{v:.{-exp}f}"


def marker(kind, x, y, colour, hollow):
    fill = "white" if hollow else colour
    style = f'fill="{fill}" stroke="{colour}" stroke-width="1.5"'
    if kind == "circle":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" {style}/>'
    if kind == "square":
        return f'<rect x="{x - 3.5:.1f}" y="{y - 3.5:.1f}" width="7" height="7" {style}/>'
    return (f'<path d="M{x:.1f},{y - 4.5:.1f} L{x + 4.5:.1f},{y + 3.5:.1f} '
            f'L{x - 4.5:.1f},{y + 3.5:.1f} Z" {style}/>')


def series_of(data):
    """(label, colour, hierarchy, hollow, {live: [pin p50]}, {live: [narrowed p50]})."""
    rows = data["real_cgroup"] + data["daemon"]
    machines = sorted({r["machine"] for r in rows})
    colour = {m: COLOURS[i % len(COLOURS)] for i, m in enumerate(machines)}
    groups = {}
    for r in rows:
        groups.setdefault((r["machine"], r["hierarchy"]), []).append(r)
    out = []
    for (machine, hier), rs in sorted(groups.items()):
        if hier == "fake":
            label = f"{machine}: fake v2 tree (the daemon's own overhead)"
        else:
            label = f"{machine}: cgroup {hier}" + (", emulated" if emulated(machine) else "")
        pin, narrowed = {}, {}
        for r in rs:
            live = int(r["live"])
            pin.setdefault(live, []).append(float(r["pin_p50_ms"]))
            narrowed.setdefault(live, []).append(float(r["narrowed_p50_ms"]))
        out.append((label, colour[machine], hier, emulated(machine), pin, narrowed))
    return out


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def panel(x0, title, series, which):
    """One log-log panel: `which` picks pin (4) or narrowed (5) of a series."""
    points = [(live, y) for s in series for live, ys in s[which].items() for y in ys]
    out = [f'<text x="{x0 + PANEL_W / 2:.1f}" y="{TOP - 14}" text-anchor="middle" '
           f'font-weight="bold">{escape(title)}</text>']
    if not points:
        out.append(f'<text x="{x0 + PANEL_W / 2:.1f}" y="{TOP + PANEL_H / 2:.1f}" '
                   'text-anchor="middle">no runs recorded</text>')
        return out
    xlo, xhi = decades([p[0] for p in points])
    ylo, yhi = decades([p[1] for p in points])

    def px(v):
        return x0 + (math.log10(v) - xlo) / (xhi - xlo) * PANEL_W

    def py(v):
        return TOP + PANEL_H - (math.log10(v) - ylo) / (yhi - ylo) * PANEL_H

    out.append(f'<rect x="{x0}" y="{TOP}" width="{PANEL_W}" height="{PANEL_H}" '
               'fill="none" stroke="#444"/>')
    for e in range(xlo, xhi + 1):
        x = px(10.0 ** e)
        out.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + PANEL_H}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{TOP + PANEL_H + 16}" text-anchor="middle">{tick_label(e)}</text>')
    for e in range(ylo, yhi + 1):
        y = py(10.0 ** e)
        out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + PANEL_W}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{tick_label(e)}</text>')
    out.append(f'<text x="{x0 + PANEL_W / 2:.1f}" y="{TOP + PANEL_H + 36}" '
               'text-anchor="middle">live containers</text>')
    out.append(f'<text transform="translate({x0 - 48},{TOP + PANEL_H / 2:.1f}) rotate(-90)" '
               'text-anchor="middle">ms, median</text>')
    for s in series:
        _label, colour, hier, hollow, *_ = s
        dash, kind = STYLES.get(hier, ("", "circle"))
        by_live = sorted(s[which].items())
        if len(by_live) > 1:
            path = " ".join(f"{'M' if i == 0 else 'L'}{px(live):.1f},{py(median(ys)):.1f}"
                            for i, (live, ys) in enumerate(by_live))
            dashed = f' stroke-dasharray="{dash}"' if dash else ""
            out.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="1.5"{dashed}/>')
        for live, ys in by_live:
            for y in ys:
                out.append(marker(kind, px(live), py(y), colour, hollow))
    return out


def pin_svg(data):
    series = series_of(data)
    width = LEFT + 2 * PANEL_W + GAP + RIGHT
    legend_top = TOP + PANEL_H + 60
    height = legend_top + LEGEND_ROW * max(len(series), 1) + 10
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        "<title>pin p50 and shared pool narrowed p50 against live containers</title>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    out += panel(LEFT, "pin (mkdir to pinned), p50", series, 4)
    out += panel(LEFT + PANEL_W + GAP, "shared pool narrowed (mkdir to all narrowed), p50", series, 5)
    for i, (label, colour, hier, hollow, *_rest) in enumerate(series):
        y = legend_top + i * LEGEND_ROW
        dash, kind = STYLES.get(hier, ("", "circle"))
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<line x1="{LEFT}" y1="{y}" x2="{LEFT + 30}" y2="{y}" stroke="{colour}" '
                   f'stroke-width="1.5"{dashed}/>')
        out.append(marker(kind, LEFT + 15, y, colour, hollow))
        out.append(f'<text x="{LEFT + 40}" y="{y + 4}">{escape(label)}</text>')
    if not series:
        out.append(f'<text x="{LEFT}" y="{legend_top + 4}">no runs recorded</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# --- noise (benches/noise.sh) -----------------------------------------------

CLASSES = ("neighbour", "movable", "per_cpu", "interrupt", "softirq")
SETUPS = {
    "1-taskset": "1 taskset alone",
    "2-kubelet": "2 kubelet-like",
    "3-defaults": "3 defaults",
    "4-irq-unthrottle": "4 irq + unthrottle",
    "5-housekeeping": "5 housekeeping",
}


def machine_label(machine, hier):
    return f"{machine}, cgroup {hier}" + (" (emulated)" if emulated(machine) else "")


def noise_groups(rows):
    """{(machine, hierarchy): {setup: [rows]}}, set-ups in order."""
    out = {}
    for r in rows:
        out.setdefault((r["machine"], r["hierarchy"]), {}).setdefault(r["setup"], []).append(r)
    return {k: dict(sorted(v.items())) for k, v in sorted(out.items())}


def per_min(count, seconds):
    return float(count) * 60.0 / float(seconds) if float(seconds) > 0 else 0.0


def rate(x):
    return f"{x:,.0f}" if x >= 10 else f"{x:.1f}"


def noise_table(rows):
    header = ["machine", "set-up", "runs", "neighbour", "movable", "per_cpu",
              "interrupt", "softirq", "oslat ≥ 10 µs", "oslat ≥ 32 µs", "oslat max µs"]
    body = []
    for (machine, hier), setups in noise_groups(rows).items():
        for setup, rs in setups.items():
            cells = [rate(median([float(r[c]) for r in rs])) for c in CLASSES]
            ten = median([per_min(r["oslat_10us"], r["oslat_s"]) for r in rs])
            big = median([per_min(r["oslat_32us"], r["oslat_s"]) for r in rs])
            mx = median([float(r["oslat_max_us"]) for r in rs])
            body.append([machine_label(machine, hier), SETUPS.get(setup, setup), str(len(rs)),
                         *cells, rate(ten), rate(big), f"{mx:,.0f}"])
    return table(header, body)


NOISE_W, NOISE_H = 640, 240
NOISE_COLOURS = dict(zip(CLASSES, ["#d62728", "#ff7f0e", "#2ca02c", "#1f77b4", "#9467bd"]))


def noise_svg(rows):
    groups = noise_groups(rows)
    left, top, gap = 70, 40, 80
    height = top + max(len(groups), 1) * (NOISE_H + gap) + 20
    width = left + NOISE_W + 30
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        "<title>switches per minute on the exclusive CPU, by class and set-up</title>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    for i, c in enumerate(CLASSES):
        x = left + i * 110
        out.append(f'<rect x="{x}" y="{top - 30}" width="10" height="10" fill="{NOISE_COLOURS[c]}"/>')
        out.append(f'<text x="{x + 14}" y="{top - 21}">{c}</text>')
    if not groups:
        out.append(f'<text x="{left}" y="{top + 20}">no runs recorded</text>')
    values = [float(r[c]) for r in rows for c in CLASSES if float(r[c]) > 0]
    lo, hi = decades(values) if values else (0, 1)
    lo = max(lo, 0)
    for g, ((machine, hier), setups) in enumerate(groups.items()):
        y0 = top + 20 + g * (NOISE_H + gap)

        def py(v):
            v = max(v, 10.0 ** lo)
            return y0 + NOISE_H - (math.log10(v) - lo) / (hi - lo) * NOISE_H

        out.append(f'<text x="{left + NOISE_W / 2:.1f}" y="{y0 - 6}" text-anchor="middle" '
                   f'font-weight="bold">{escape(machine_label(machine, hier))}</text>')
        out.append(f'<rect x="{left}" y="{y0}" width="{NOISE_W}" height="{NOISE_H}" '
                   'fill="none" stroke="#444"/>')
        for e in range(lo, hi + 1):
            y = py(10.0 ** e)
            out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + NOISE_W}" y2="{y:.1f}" stroke="#ddd"/>')
            out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{tick_label(e)}</text>')
        out.append(f'<text transform="translate({left - 50},{y0 + NOISE_H / 2:.1f}) rotate(-90)" '
                   'text-anchor="middle">per minute, median</text>')
        slot = NOISE_W / len(SETUPS)
        bar = slot * 0.8 / len(CLASSES)
        for k, (setup, name) in enumerate(SETUPS.items()):
            x0 = left + k * slot + slot * 0.1
            out.append(f'<text x="{left + k * slot + slot / 2:.1f}" y="{y0 + NOISE_H + 16}" '
                       f'text-anchor="middle">{escape(name)}</text>')
            rs = setups.get(setup)
            if not rs:
                out.append(f'<text x="{left + k * slot + slot / 2:.1f}" y="{y0 + NOISE_H / 2:.1f}" '
                           'text-anchor="middle" fill="#888">not run</text>')
                continue
            for j, c in enumerate(CLASSES):
                v = median([float(r[c]) for r in rs])
                if v <= 0:
                    out.append(f'<text x="{x0 + j * bar + bar / 2:.1f}" y="{y0 + NOISE_H - 4}" '
                               f'text-anchor="middle" font-size="10" fill="{NOISE_COLOURS[c]}">0</text>')
                    continue
                y = py(v)
                out.append(f'<rect x="{x0 + j * bar:.1f}" y="{y:.1f}" width="{bar - 1:.1f}" '
                           f'height="{y0 + NOISE_H - y:.1f}" fill="{NOISE_COLOURS[c]}">'
                           f'<title>{escape(name)}: {c} {rate(v)}/min</title></rect>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# --- soak.svg ---------------------------------------------------------------

SOAK_W, SOAK_H = 380, 220


def soak_runs(rows):
    """The per-minute rows of each soak run, by (machine, date, seed)."""
    runs = {}
    for r in rows:
        runs.setdefault((r["machine"], r["date"], r["seed"]), []).append(r)
    return {k: sorted(v, key=lambda r: int(r["elapsed_s"])) for k, v in sorted(runs.items())}


def soak_svg(rows):
    runs = soak_runs(rows)
    left, top, gap = 70, 50, 90
    panels = [("rss_kib", "RSS (MiB)", 1 / 1024), ("fds", "open files", 1)]
    width = left + len(panels) * (SOAK_W + gap)
    height = top + SOAK_H + 50 + LEGEND_ROW * max(len(runs), 1)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        "<title>the daemon's RSS and open files through each soak</title>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    xmax = max([int(r["elapsed_s"]) for rs in runs.values() for r in rs] + [60]) / 60
    for p, (key, title, scale) in enumerate(panels):
        x0 = left + p * (SOAK_W + gap)
        values = [float(r[key]) * scale for rs in runs.values() for r in rs if r[key]]
        ymax = max(values + [1]) * 1.2
        out.append(f'<text x="{x0 + SOAK_W / 2:.1f}" y="{top - 12}" text-anchor="middle" '
                   f'font-weight="bold">{title}</text>')
        out.append(f'<rect x="{x0}" y="{top}" width="{SOAK_W}" height="{SOAK_H}" fill="none" stroke="#444"/>')
        for i in range(5):
            v = ymax * i / 4
            y = top + SOAK_H - v / ymax * SOAK_H
            out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + SOAK_W}" y2="{y:.1f}" stroke="#ddd"/>')
            out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{v:.0f}</text>')
        out.append(f'<text x="{x0 + SOAK_W / 2:.1f}" y="{top + SOAK_H + 30}" text-anchor="middle">minutes</text>')
        for i in range(5):
            m = xmax * i / 4
            x = x0 + m / xmax * SOAK_W
            out.append(f'<text x="{x:.1f}" y="{top + SOAK_H + 16}" text-anchor="middle">{m:.0f}</text>')
        for n, rs in enumerate(runs.values()):
            pts = " ".join(
                f"{x0 + int(r['elapsed_s']) / 60 / xmax * SOAK_W:.1f},"
                f"{top + SOAK_H - float(r[key]) * scale / ymax * SOAK_H:.1f}"
                for r in rs if r[key])
            out.append(f'<polyline points="{pts}" fill="none" stroke="{COLOURS[n % len(COLOURS)]}" stroke-width="1.5"/>')
    if not runs:
        out.append(f'<text x="{left}" y="{top + 20}">no runs recorded</text>')
    for n, (machine, date, seed) in enumerate(runs):
        y = top + SOAK_H + 50 + n * LEGEND_ROW
        out.append(f'<line x1="{left}" y1="{y - 4}" x2="{left + 20}" y2="{y - 4}" '
                   f'stroke="{COLOURS[n % len(COLOURS)]}" stroke-width="2"/>')
        out.append(f'<text x="{left + 26}" y="{y}">{escape(machine)}, {when(date)}, seed {seed}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# --- the command ------------------------------------------------------------


def outputs():
    data = {b: read_rows(b) for b in BENCHES}
    return {SVG: pin_svg(data), NOISE_SVG: noise_svg(data["noise"]),
            SOAK_SVG: soak_svg(data["soak-samples"]), TABLE: runs_md(data)}


def rows_of(path):
    """[(bench, header, rows)] of a benchmark's CSV or a VM bed log (whose
    BENCH-CSV| rows are real_cgroup's or noise's, each after its header, and
    whose SOAK-CSV|<bench>| rows are the soak's)."""
    text = path.read_text()
    if path.suffix == ".log":
        lines = text.splitlines()
        bench_text = "".join(line[len(VM_PREFIX):] + "\n" for line in lines
                             if line.startswith(VM_PREFIX))
        records = list(csv.reader(io.StringIO(bench_text)))
        out = []
        for r in records:
            if r and r[0] == "date":
                out.append(("noise" if "setup" in r else "real_cgroup", r, []))
            elif out:
                out[-1][2].append(r)
        for bench in ("soak-summary", "soak-samples"):
            prefix = f"{SOAK_PREFIX}{bench}| "
            records = list(csv.reader(line[len(prefix):] for line in lines
                                      if line.startswith(prefix)))
            if records:
                out.append((bench, records[0], [r for r in records[1:] if r != records[0]]))
        if not out:
            sys.exit(f"benches/plot.py: {path}: no rows")
        return out
    bench = path.stem
    if bench not in BENCHES:
        sys.exit(f"benches/plot.py: {path}: not a benchmark's CSV ({', '.join(BENCHES)})")
    records = list(csv.reader(io.StringIO(text)))
    if not records:
        sys.exit(f"benches/plot.py: {path}: no rows")
    header, rows = records[0], [r for r in records[1:] if r != records[0]]
    return [(bench, header, rows)]


def add(paths, last):
    for path, (bench, header, rows) in ((p, x) for p in map(Path, paths) for x in rows_of(p)):
        if last and rows:
            newest = max(r[0] for r in rows)
            rows = [r for r in rows if r[0] == newest]
        dest = DATA / f"{bench}.csv"
        old = []
        if dest.exists():
            with dest.open(newline="") as f:
                old = list(csv.reader(f))
            if old and old[0] != header:
                sys.exit(f"benches/plot.py: {path} and {dest.relative_to(ROOT)} have other columns")
        fresh = [r for r in rows if r not in old]
        with dest.open("a", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            if not old:
                w.writerow(header)
            w.writerows(fresh)
        print(f"{dest.relative_to(ROOT)}: {len(fresh)} rows added from {path}")


def main(args):
    if args and args[0] == "--add":
        last = "--last" in args
        paths = [a for a in args[1:] if a != "--last"]
        if not paths:
            sys.exit(__doc__)
        DATA.mkdir(parents=True, exist_ok=True)
        add(paths, last)
        args = []
    if args not in ([], ["--check"]):
        sys.exit(__doc__)
    stale = []
    for path, text in outputs().items():
        rel = path.relative_to(ROOT)
        if args == ["--check"]:
            if not path.exists() or path.read_text() != text:
                stale.append(rel)
        else:
            path.write_text(text)
            print(f"wrote {rel}")
    for rel in stale:
        print(f"benches/plot.py --check: {rel} is not what the CSV gives: run benches/plot.py",
              file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
