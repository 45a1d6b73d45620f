"""Layout checks of plotly figures as a browser draws them (tests/viz/test_figure_layout.py): the
boxes of each figure's title, subtitle, subplot titles, axis titles, legend and plot areas, its
axis ranges against the data on them, and its legend entries against the points drawn.

``FIGURE_FACTS_JS`` runs in the page (Playwright ``page.evaluate``); the functions below read
its result and return one line per defect (empty: none)."""

from __future__ import annotations

#: per .js-plotly-plot: its box, text boxes, plot-area boxes, axis ranges with the data extent
#: of the marker traces on each axis, and the legend entries with whether each has points
FIGURE_FACTS_JS = r"""() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(el => {
    const rect = e => { const r = e.getBoundingClientRect();
                        return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
    const texts = [];
    const push = (kind, g) => { const r = g.getBoundingClientRect();
        if (r.width > 0 && r.height > 0)
            texts.push({kind, text: (g.textContent || '').slice(0, 60), ...rect(g)}); };
    el.querySelectorAll('g.g-gtitle text').forEach(t => push('title', t));
    el.querySelectorAll('g').forEach(g => {
        const c = g.getAttribute('class') || '';
        if (/^g-(x\d*|y\d*)title$/.test(c)) push('axis title', g);
    });
    el.querySelectorAll('g.annotation').forEach(g => push('annotation', g));
    el.querySelectorAll('g.xtick text').forEach(t => push('x tick', t));
    const legend = el.querySelector('g.legend');
    if (legend) push('legend', legend);
    const plots = Array.from(el.querySelectorAll('g.draglayer > g > rect.nsewdrag'))
        .map(r => ({name: r.parentNode.getAttribute('class'), ...rect(r)}));
    const fl = el._fullLayout || {}, fd = el._fullData || [];
    const finite = v => v !== null && v !== undefined && v !== '' && isFinite(+v);
    const present = v => finite(v) || (typeof v === 'string' && v !== '');
    // what each axis shows: the data of its scatter traces (with their error bars) and its
    // lines (shapes); axes that match another (shared axes) pool with it
    const axisKey = id => { const a = fl[id[0] + 'axis' + id.slice(1)];
                            return (a && a.matches) || id; };
    const extent = {};
    const add = (id, v, count = 1) => { if (!finite(v)) return; const k = axisKey(id);
        const e = extent[k] || (extent[k] = {lo: +v, hi: +v, n: 0});
        e.lo = Math.min(e.lo, +v); e.hi = Math.max(e.hi, +v); e.n += count; };
    fd.forEach(t => {
        if (!/^scatter/.test(t.type) || t.visible !== true) return;
        ['x', 'y'].forEach(ax => {
            const id = (ax === 'x' ? (t.xaxis || 'x') : (t.yaxis || 'y'));
            const err = t['error_' + ax] || {};
            (t[ax] || []).forEach((v, i) => {
                add(id, v);
                if (err.visible && err.array) {
                    add(id, +v + (+err.array[i] || 0), 0);
                    add(id, +v - (+((err.symmetric === false ? err.arrayminus : err.array)
                                    || [])[i] || 0), 0);
                }
            });
        });
    });
    (fl.shapes || []).forEach(s => {
        if (/^y\d*$/.test(s.yref || '')) { add(s.yref, s.y0, 0); add(s.yref, s.y1, 0); }
        if (/^x\d*$/.test(s.xref || '')) { add(s.xref, s.x0, 0); add(s.xref, s.x1, 0); }
    });
    const axes = Object.keys(fl).filter(k => /^[xy]axis\d*$/.test(k)).map(k => {
        const a = fl[k], id = k[0] + k.slice(5);
        return {id, type: a.type, range: a.range ? a.range.map(Number) : null,
                autorange: a.autorange === true, scaleanchor: a.scaleanchor || null,
                data: extent[axisKey(id)] || null};
    });
    // legend entries: a trace shown in the legend has points, or (a legend-only key such as a
    // seed's symbol) some drawn trace uses its symbol
    const hasPoints = t => {
        const xs = t.x || [], ys = t.y || [];
        if (t.type === 'histogram') return xs.some(present) || ys.some(present);
        for (let i = 0; i < Math.max(xs.length, ys.length); i++)
            if ((t.type === 'bar' ? finite(t.orientation === 'h' ? xs[i] : ys[i])
                                  : present(xs[i]) && present(ys[i]))) return true;
        return false;
    };
    const symbols = new Set();
    fd.forEach(t => { if (hasPoints(t) && t.marker && t.marker.symbol !== undefined)
        [].concat(t.marker.symbol).forEach(s => symbols.add(String(s))); });
    const entries = fd.filter(t => t.showlegend && t.visible !== false).map(t => ({
        name: String(t.name || '').slice(0, 60),
        points: hasPoints(t)
            || (!!(t.meta && t.meta.legend_only) && t.marker
                && symbols.has(String([].concat(t.marker.symbol)[0]))),
    }));
    const title = (el.layout && el.layout.title && (el.layout.title.text || '')) || '';
    return {title: String(title).replace(/<[^>]+>/g, ' ').slice(0, 70), box: rect(el), texts,
            plots, axes, entries};
})"""


def _overlap(a: dict, b: dict, tol: float) -> bool:
    return (min(a["right"], b["right"]) - max(a["left"], b["left"]) > tol
            and min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > tol)


def text_defects(fig: dict, tol: float = 1.0) -> list[str]:
    """Text that runs into other text (title into a subplot title, two subplot titles into each
    other, the legend into an axis title) or out of the figure (a cut subtitle)."""
    bad, box, texts = [], fig["box"], fig["texts"]
    for t in texts:
        if t["kind"] == "x tick":
            continue
        if (t["left"] < box["left"] - tol or t["right"] > box["right"] + tol
                or t["top"] < box["top"] - tol or t["bottom"] > box["bottom"] + tol):
            bad.append(f"{fig['title']!r}: {t['kind']} {t['text']!r} is cut by the figure's edge")
    for i, a in enumerate(texts):
        for b in texts[i + 1:]:
            if a["kind"] == b["kind"] == "x tick":  # turned labels' boxes overlap by design
                continue
            if _overlap(a, b, tol):
                bad.append(f"{fig['title']!r}: {a['kind']} {a['text']!r} runs into {b['kind']} "
                           f"{b['text']!r}")
    for t in texts:  # titles and legends stay off the plot areas
        if t["kind"] in ("title", "legend"):
            for p in fig["plots"]:
                if _overlap(t, p, tol):
                    bad.append(f"{fig['title']!r}: {t['kind']} {t['text']!r} covers a plot area")
    return bad


def legend_gap_defects(fig: dict, max_gap: float = 60.0) -> list[str]:
    """A legend below the plot that sits more than ``max_gap`` px under the lowest text or plot
    area above it (the x axis's labels and title)."""
    legend = [t for t in fig["texts"] if t["kind"] == "legend"]
    if not legend or not fig["plots"]:
        return []
    lg = legend[0]
    if lg["top"] < max(p["bottom"] for p in fig["plots"]):
        return []  # a legend beside or above the plot
    above = [p["bottom"] for p in fig["plots"]] + [
        t["bottom"] for t in fig["texts"] if t is not lg and t["bottom"] <= lg["top"] + 1]
    gap = lg["top"] - max(above)
    return ([f"{fig['title']!r}: {gap:.0f} px of empty space between the axes and the legend"]
            if gap > max_gap else [])


def range_defects(fig: dict, slack: float = 0.35, axes: str = "xy") -> list[str]:
    """Linear axes whose range runs far wider than the data drawn on them (points with their
    error bars, and lines such as a zero line): more than ``slack`` of the data's span beyond
    it on either side. Judged: axes whose range plotly chose (autorange) and axes tied to
    another's scale (a map's equal units), with at least 3 points drawn; a range the figure
    fixes on purpose (0-100 %) is not."""
    bad = []
    tied = {a["scaleanchor"] for a in fig["axes"] if a["scaleanchor"]} | {
        a["id"] for a in fig["axes"] if a["scaleanchor"]}
    for a in fig["axes"]:
        if (a["id"][0] not in axes or a["type"] != "linear" or not a["range"] or not a["data"]
                or a["data"]["n"] < 3 or not (a["autorange"] or a["id"] in tied)):
            continue
        lo, hi = a["data"]["lo"], a["data"]["hi"]
        span = max(hi - lo, 1e-9)
        r0, r1 = sorted(a["range"])
        if lo - r0 > slack * span or r1 - hi > slack * span:
            bad.append(f"{fig['title']!r}: axis {a['id']} runs {r0:.3g} to {r1:.3g} while the "
                       f"data sit in {lo:.3g} to {hi:.3g}")
    return bad


def legend_entry_defects(fig: dict) -> list[str]:
    """Legend entries that have no point in the figure (e.g. a seed whose runs drew nothing)."""
    return [f"{fig['title']!r}: legend entry {e['name']!r} has no points"
            for e in fig["entries"] if not e["points"]]
