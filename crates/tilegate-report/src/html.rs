//! The job report: one self-contained HTML file (inline CSS and SVG, the scene's thumbnail as
//! an embedded PNG, no script, font or request of any kind), built from a [`Gathered`] job.
//!
//! The page carries its data for machines too: every window cell has `data-window` and
//! `data-state`, every legend entry `data-state` and `data-count`, and the status model
//! `status --json` prints is embedded as `<script type="application/json"
//! id="tilegate-status">` (data, never run).

use crate::status::{Gathered, JobStatus, WindowState};
use std::fmt::Write as _;
use tilegate_core::UnixMillis;
use tilegate_core::table::WindowFacts;

/// The colour of each state in the grid and its legend.
pub fn colour(s: WindowState) -> &'static str {
    match s {
        WindowState::Written => "#2e7d32",
        WindowState::AlreadyPresent => "#1565c0",
        WindowState::EncodeSkipped => "#4dd0e1",
        WindowState::DeadLettered => "#c62828",
        WindowState::Missing => "#bdbdbd",
    }
}

fn describe(s: WindowState) -> &'static str {
    match s {
        WindowState::Written => "this job's Create wrote the tile",
        WindowState::AlreadyPresent => {
            "encoded, then refused by the store: a duplicate had written it (absorbed)"
        }
        WindowState::EncodeSkipped => "found in place before encoding (duplicate absorbed)",
        WindowState::DeadLettered => "in the dead-letter queue (reason on hover)",
        WindowState::Missing => "no row yet: queued, in flight or lost",
    }
}

/// Text safe inside HTML elements and attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Standard base64 with padding (for the embedded PNG).
fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// What the report shows beside the stored rows.
#[derive(Debug, Clone, Default)]
pub struct Extras {
    /// A PNG of the assembled scene (its smallest overview), if it exists.
    pub thumbnail_png: Option<Vec<u8>>,
    /// Where the report was made (shown, not used).
    pub generated_at: Option<UnixMillis>,
    /// A pyramid job's map: the tiles of one zoom (z, x, y, PNG), laid out as they join.
    pub map_tiles: Vec<(u8, u32, u32, Vec<u8>)>,
}

/// The report page of a gathered job and its status (`g.status(prices)`).
pub fn render(g: &Gathered, st: &JobStatus, extras: &Extras) -> String {
    let mut h = String::with_capacity(64 * 1024 + g.rows.len() * 200);
    let title = format!("tilegate job {}", st.job_id);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{CSS}</style></head><body>\n",
        escape(&title)
    );
    let _ = write!(h, "<header><h1>{}</h1>", escape(&title));
    // The verdict is the job's state and its counts, the same ones `status` prints.
    let c = &st.counts;
    let mut detail = format!("{} of {} windows recorded", c.recorded, c.windows);
    if c.dead_lettered > 0 || c.missing > 0 {
        let _ = write!(
            detail,
            "; {} dead-lettered, {} missing",
            c.dead_lettered, c.missing
        );
    }
    let _ = writeln!(
        h,
        "<p class=\"verdict {state}\" id=\"verdict\"><span id=\"lifecycle\">{state}</span>: \
         {} — {}</p></header>",
        escape(&detail),
        escape(&st.lifecycle.next_step(st.job_id.as_str())),
        state = st.lifecycle.as_str(),
    );
    if let Some(stall) = &st.stalled {
        let _ = writeln!(
            h,
            "<p class=\"stalled\" id=\"stalled\">stalled: {} ({}) — `tilegate reconcile-jobs \
             --once` moves it on</p>",
            stall.reason.as_str(),
            stall.count
        );
    }
    identity(&mut h, st, extras);
    grid(&mut h, g, st);
    outcomes(&mut h, st);
    timings(&mut h, g);
    throughput(&mut h, g);
    workers(&mut h, st);
    scene(&mut h, st, extras);
    cost(&mut h, st);
    // `<`, `>` and `&` only occur inside JSON strings: as escapes there, no text in the data
    // (a URI, a dead letter's reason) can end the block or open a comment in it.
    // The document `status --json` prints: the model with a readable copy of every time.
    let doc = serde_json::to_value(st).expect("the status serialises");
    let json = serde_json::to_string(&tilegate_core::time::with_utc(doc))
        .expect("the status serialises")
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026");
    let _ = write!(
        h,
        "<script type=\"application/json\" id=\"tilegate-status\">{json}</script>\n</body></html>\n"
    );
    h
}

fn identity(h: &mut String, st: &JobStatus, extras: &Extras) {
    let rows: [(&str, String); 9] = [
        ("job ID", st.job_id.to_string()),
        ("source", st.source.clone()),
        ("source ETag", st.source_etag.clone()),
        ("recipe", st.recipe.clone()),
        ("prefix", st.prefix.clone()),
        ("tenant", st.tenant.clone()),
        (
            "scene",
            format!(
                "{} × {} pixels, {} band(s) of {}, windows of {} px",
                st.scene.width, st.scene.height, st.scene.bands, st.scene.dtype, st.window
            ),
        ),
        ("planned", tilegate_core::time::rfc3339(st.created_at)),
        (
            "report made",
            extras
                .generated_at
                .map_or_else(|| "—".to_owned(), tilegate_core::time::rfc3339),
        ),
    ];
    h.push_str("<section id=\"identity\"><h2>Job</h2><table class=\"kv\">");
    for (k, v) in rows {
        let _ = write!(
            h,
            "<tr><th>{k}</th><td><code>{}</code></td></tr>",
            escape(&v)
        );
    }
    h.push_str("</table></section>\n");
}

/// Above this many windows the grid is drawn as an image, one pixel per window, instead of one
/// SVG element per window: a 100,000-window job's page stays small and opens at once.
pub const GRID_ELEMENTS_MAX: u64 = 10_000;

/// The window grid as an image: one pixel per window, coloured by state.
fn raster_grid(h: &mut String, g: &Gathered, rows: u32, cols: u32) {
    let mut states = vec![0u8; rows as usize * cols as usize];
    for (win, state, _, _) in g.windows() {
        states[win.row as usize * cols as usize + win.col as usize] = WindowState::ALL
            .iter()
            .position(|s| *s == state)
            .unwrap_or(0)
            as u8;
    }
    let palette: Vec<[u8; 3]> = WindowState::ALL.iter().map(|s| rgb(colour(*s))).collect();
    let png = crate::png::paletted(cols, rows, &states, &palette);
    // Scaled up to about the SVG grid's size, each window a sharp square.
    let scale = (720 / rows.max(cols).max(1)).max(1);
    let _ = write!(
        h,
        "<img id=\"grid\" class=\"raster\" width=\"{w}\" height=\"{hgt}\" \
         style=\"image-rendering:pixelated\" alt=\"window grid, {rows} rows by {cols} columns, \
         one pixel per window\" src=\"data:image/png;base64,{}\">\
         <p class=\"note\">{n} windows: drawn one pixel per window. Each window's facts are in \
         <code>status --json</code> and the manifest.</p>",
        base64(&png),
        w = cols * scale,
        hgt = rows * scale,
        n = u64::from(rows) * u64::from(cols),
    );
}

/// `#rrggbb` as bytes.
fn rgb(hex: &str) -> [u8; 3] {
    let v = u32::from_str_radix(hex.trim_start_matches('#'), 16).unwrap_or(0);
    [(v >> 16) as u8, (v >> 8) as u8, v as u8]
}

fn grid(h: &mut String, g: &Gathered, st: &JobStatus) {
    let gr = &g.job.grid;
    let (rows, cols) = (gr.rows(), gr.cols());
    let cell = (720 / rows.max(cols).max(1)).clamp(2, 28);
    let gap = u32::from(cell >= 8);
    let (w, hgt) = (cols * cell, rows * cell);
    h.push_str("<section id=\"windows\"><h2>Windows</h2>");
    h.push_str("<ul class=\"legend\" id=\"legend\">");
    for s in WindowState::ALL {
        let n = st.window_states.get(s);
        let _ = write!(
            h,
            "<li data-state=\"{name}\" data-count=\"{n}\" title=\"{desc}\">\
             <span class=\"swatch\" style=\"background:{c}\"></span>{name} \
             <b class=\"count\">{n}</b></li>",
            name = s.name(),
            desc = describe(s),
            c = colour(s)
        );
    }
    let _ = write!(h, "<li class=\"total\">of <b>{}</b></li></ul>", st.windows);
    if gr.len() > GRID_ELEMENTS_MAX {
        raster_grid(h, g, rows, cols);
        h.push_str("</section>\n");
        return;
    }
    let _ = write!(
        h,
        "<svg id=\"grid\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{hgt}\" \
         viewBox=\"0 0 {w} {hgt}\" role=\"img\" aria-label=\"window grid, {r} rows by {c} columns\">",
        r = rows,
        c = cols
    );
    for (win, state, row, dead) in g.windows() {
        let mut tip = format!("{win} {}", state.name());
        if let Some(r) = row {
            let f = &r.facts;
            if f.attempt > 0 {
                let _ = write!(tip, " · receive {}", f.attempt);
            }
            if !f.worker.is_empty() {
                let _ = write!(tip, " · {}", f.worker);
            }
            for (name, v) in [
                ("wait", f.wait_ms),
                ("read", f.read_ms),
                ("encode", f.encode_ms),
                ("commit", f.commit_ms),
            ] {
                if let Some(v) = v {
                    let _ = write!(tip, " · {name} {v} ms");
                }
            }
            let _ = write!(tip, " · {} bytes", r.size);
        }
        if let Some(d) = dead {
            let _ = write!(
                tip,
                " · {} (after {} receive(s))",
                d.reason, d.receive_count
            );
        }
        let _ = write!(
            h,
            "<rect class=\"cell\" data-window=\"{win}\" data-state=\"{s}\" x=\"{x}\" y=\"{y}\" \
             width=\"{cw}\" height=\"{cw}\" fill=\"{fill}\"><title>{t}</title></rect>",
            s = state.name(),
            x = win.col * cell,
            y = win.row * cell,
            cw = cell - gap,
            fill = colour(state),
            t = escape(&tip)
        );
    }
    h.push_str("</svg></section>\n");
}

fn outcomes(h: &mut String, st: &JobStatus) {
    let c = |name: &str| st.counters.get(name).copied().unwrap_or(0);
    use tilegate_core::metrics as m;
    h.push_str("<section id=\"outcomes\"><h2>Exactly once, counted</h2><table class=\"kv\">");
    let rows = [
        (
            "duplicates absorbed (windows)",
            st.duplicates_absorbed,
            "id=\"duplicates\"",
        ),
        ("precondition refusals", c(m::PRECONDITION_FAILED), ""),
        (
            "encodes skipped (tile already there)",
            c(m::DUPLICATE_ENCODES_SKIPPED),
            "",
        ),
        ("tiles written", c(m::TILES_WRITTEN), ""),
        ("manifest rows written", c(m::MANIFEST_ROWS_WRITTEN), ""),
        ("claims won", c(m::CLAIMS_WON), ""),
        ("claims lost", c(m::CLAIMS_LOST), ""),
        (
            "multipart bytes uploaded",
            c(m::MULTIPART_BYTES_UPLOADED),
            "",
        ),
        ("panics caught", c(m::WINDOW_PANICS), ""),
        ("source changed", c(m::SOURCE_CHANGED), ""),
        (
            "dead letters of this job",
            st.dead_letters_for_job,
            "id=\"dead-letters\"",
        ),
    ];
    for (k, v, id) in rows {
        let _ = write!(h, "<tr {id}><th>{k}</th><td class=\"num\">{v}</td></tr>");
    }
    h.push_str("</table>");
    if !st.dead_letters_by_reason.is_empty() {
        h.push_str("<h3>Dead letters by reason</h3><table class=\"kv\" id=\"dead-reasons\">");
        for (reason, n) in &st.dead_letters_by_reason {
            let _ = write!(
                h,
                "<tr data-reason=\"{r}\"><th>{r}</th><td class=\"num\">{n}</td></tr>",
                r = escape(reason)
            );
        }
        h.push_str("</table><table class=\"list\"><tr><th>window</th><th>receives</th><th>reason</th></tr>");
        for d in &st.dead_letters {
            let _ = write!(
                h,
                "<tr><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                d.window.map_or_else(|| "—".to_owned(), |w| w.to_string()),
                d.receive_count,
                escape(&d.reason)
            );
        }
        h.push_str("</table>");
    }
    h.push_str("<p class=\"note\">Counters observe (a killed process loses its last second of counts); the manifest proves.</p></section>\n");
}

/// A small histogram of `values` (milliseconds) as SVG, with its median, 90th percentile and
/// maximum.
fn histogram(h: &mut String, name: &str, values: &mut [u64]) {
    let _ = write!(
        h,
        "<figure class=\"hist\" data-step=\"{name}\"><figcaption><b>{name}</b> "
    );
    if values.is_empty() {
        h.push_str("no rows record it</figcaption></figure>");
        return;
    }
    values.sort_unstable();
    let q = |p: f64| values[((values.len() - 1) as f64 * p).round() as usize];
    let _ = write!(
        h,
        "median {} ms · p90 {} ms · max {} ms · {} windows</figcaption>",
        q(0.5),
        q(0.9),
        values[values.len() - 1],
        values.len()
    );
    const BINS: usize = 24;
    let max = values[values.len() - 1].max(1);
    let mut bins = [0u64; BINS];
    for v in values.iter() {
        let i = ((*v as f64 / max as f64) * (BINS - 1) as f64).round() as usize;
        bins[i.min(BINS - 1)] += 1;
    }
    let top = bins.iter().copied().max().unwrap_or(1).max(1);
    let (w, hh) = (BINS as u32 * 10, 60u32);
    let _ = write!(
        h,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{}\" viewBox=\"0 0 {w} {}\">",
        hh + 14,
        hh + 14
    );
    for (i, n) in bins.iter().enumerate() {
        let bh = (*n as f64 / top as f64 * f64::from(hh)).round() as u32;
        let lo = max as f64 * i as f64 / (BINS - 1) as f64;
        let _ = write!(
            h,
            "<rect x=\"{}\" y=\"{}\" width=\"9\" height=\"{bh}\" fill=\"#546e7a\"><title>≈{lo:.0} ms: {n}</title></rect>",
            i * 10,
            hh - bh
        );
    }
    let _ = write!(
        h,
        "<text x=\"0\" y=\"{y}\" class=\"axis\">0</text><text x=\"{w}\" y=\"{y}\" class=\"axis\" text-anchor=\"end\">{max} ms</text></svg></figure>",
        y = hh + 12
    );
}

fn timings(h: &mut String, g: &Gathered) {
    h.push_str(
        "<section id=\"timings\"><h2>Where the time went, per window</h2><div class=\"hists\">",
    );
    type Step = fn(&WindowFacts) -> Option<u64>;
    let steps: [(&str, Step); 4] = [
        ("queue wait", |f| f.wait_ms),
        ("source read", |f| f.read_ms),
        ("encode", |f| f.encode_ms),
        ("commit", |f| f.commit_ms),
    ];
    for (name, get) in steps {
        let mut v: Vec<u64> = g.rows.iter().filter_map(|r| get(&r.facts)).collect();
        histogram(h, name, &mut v);
    }
    h.push_str("</div></section>\n");
}

fn throughput(h: &mut String, g: &Gathered) {
    h.push_str("<section id=\"throughput\"><h2>Throughput over the job's wall time</h2>");
    let times: Vec<UnixMillis> = g.rows.iter().map(|r| r.recorded_at).collect();
    let (Some(first), Some(last)) = (times.iter().min(), times.iter().max()) else {
        h.push_str("<p>No rows yet.</p></section>\n");
        return;
    };
    const BINS: usize = 40;
    let span = (last - first).max(1);
    let mut bins = [0u64; BINS];
    for t in &times {
        let i = ((t - first) as f64 / span as f64 * (BINS - 1) as f64).round() as usize;
        bins[i.min(BINS - 1)] += 1;
    }
    let bin_s = span as f64 / 1000.0 / BINS as f64;
    let top = bins.iter().copied().max().unwrap_or(1).max(1);
    let overall = times.len() as f64 / (span as f64 / 1000.0).max(0.001);
    let _ = write!(
        h,
        "<p>{} windows recorded in {:.1} s: {overall:.1} windows/s (bins of {bin_s:.2} s; peak {:.1} windows/s)</p>",
        times.len(),
        span as f64 / 1000.0,
        top as f64 / bin_s.max(0.001)
    );
    let (w, hh) = (BINS as u32 * 12, 80u32);
    let _ = write!(
        h,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{hh}\" viewBox=\"0 0 {w} {hh}\">"
    );
    for (i, n) in bins.iter().enumerate() {
        let bh = (*n as f64 / top as f64 * f64::from(hh)).round() as u32;
        let _ = write!(
            h,
            "<rect x=\"{}\" y=\"{}\" width=\"11\" height=\"{bh}\" fill=\"#6a1b9a\"><title>+{:.1} s: {n} windows</title></rect>",
            i * 12,
            hh - bh,
            i as f64 * bin_s
        );
    }
    h.push_str("</svg></section>\n");
}

fn workers(h: &mut String, st: &JobStatus) {
    h.push_str("<section id=\"workers\"><h2>Workers</h2><table class=\"list\"><tr><th>worker</th><th>windows recorded</th><th>first</th><th>last</th></tr>");
    for w in &st.workers {
        let _ = write!(
            h,
            "<tr><td><code>{}</code></td><td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>",
            escape(&w.worker),
            w.windows,
            tilegate_core::time::rfc3339(w.first_recorded_at),
            tilegate_core::time::rfc3339(w.last_recorded_at)
        );
    }
    h.push_str("</table></section>\n");
}

fn scene(h: &mut String, st: &JobStatus, extras: &Extras) {
    h.push_str("<section id=\"scene\"><h2>Scene</h2>");
    match &st.scene_output {
        Some(o) => {
            let _ = write!(
                h,
                "<p><code>{}</code> — {} bytes, ETag <code>{}</code></p>",
                escape(&o.key),
                o.size,
                escape(o.e_tag.as_str())
            );
        }
        None => h.push_str("<p>Not assembled yet.</p>"),
    }
    map(h, extras);
    if let Some(png) = &extras.thumbnail_png {
        let _ = write!(
            h,
            "<img id=\"thumbnail\" alt=\"the assembled scene, from its smallest overview\" src=\"data:image/png;base64,{}\">",
            base64(png)
        );
    }
    h.push_str("</section>\n");
}

/// A pyramid's tiles of one zoom, each in its place (a missing one is empty: no valid pixel).
fn map(h: &mut String, extras: &Extras) {
    let t = &extras.map_tiles;
    let (Some(x0), Some(y0)) = (t.iter().map(|t| t.1).min(), t.iter().map(|t| t.2).min()) else {
        return;
    };
    let z = t[0].0;
    let _ = write!(
        h,
        "<div id=\"map\" data-zoom=\"{z}\" title=\"zoom {z}; the interactive map is `tilegate \
         serve`'s /v1/jobs/ID/map\">"
    );
    for (tz, x, y, png) in t {
        let _ = write!(
            h,
            "<img class=\"tile\" data-tile=\"{tz}/{x}/{y}\" alt=\"tile {tz}/{x}/{y}\" \
             style=\"grid-column:{};grid-row:{}\" src=\"data:image/png;base64,{}\">",
            x - x0 + 1,
            y - y0 + 1,
            base64(png)
        );
    }
    h.push_str("</div>");
}

fn cost(h: &mut String, st: &JobStatus) {
    let c = &st.cost;
    let _ = write!(
        h,
        "<section id=\"cost\"><h2>Cost</h2><p>Estimated <b>{:.6} {cur}</b> for the job's requests \
         and transfer ({:.8} {cur} per window), plus {:.6} {cur} a month to keep its {} bytes of \
         outputs. Prices of {}; see the price table.</p>",
        c.total_usd,
        c.per_window_usd,
        c.storage_usd_per_month,
        c.stored_bytes,
        escape(&c.price_table_date),
        cur = escape(&c.currency),
    );
    if c.lines.is_empty() {
        h.push_str(
            "<p>No billed requests were counted (the embedded backend's stores are local).</p>",
        );
    } else {
        h.push_str("<table class=\"list\" id=\"requests\"><tr><th>service</th><th>operation</th><th>requests</th><th>USD</th></tr>");
        for l in &c.lines {
            let _ = write!(
                h,
                "<tr data-service=\"{s}\" data-op=\"{o}\"><td>{s}</td><td>{o}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                l.requests,
                l.usd_per_request
                    .map_or_else(|| "not priced".to_owned(), |_| format!("{:.6}", l.usd)),
                s = escape(&l.service),
                o = escape(&l.op),
            );
        }
        h.push_str("</table>");
    }
    h.push_str("</section>\n");
}

const CSS: &str = "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#212121;max-width:1100px}\
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid #e0e0e0}h3{font-size:14px}\
code{font:12px ui-monospace,monospace;word-break:break-all}\
.verdict{font-weight:600}.verdict.published{color:#2e7d32}.verdict.incomplete{color:#c62828}\
table{border-collapse:collapse}th,td{padding:2px 10px 2px 0;text-align:left;vertical-align:top}.num{text-align:right;font-variant-numeric:tabular-nums}\
table.list th{border-bottom:1px solid #bdbdbd}\
.legend{list-style:none;padding:0;display:flex;flex-wrap:wrap;gap:14px}.legend li{display:flex;align-items:center;gap:6px}\
.swatch{display:inline-block;width:14px;height:14px;border-radius:2px}\
#grid{border:1px solid #e0e0e0;background:#fafafa}\
.hists{display:flex;flex-wrap:wrap;gap:24px}figure{margin:0}figcaption{font-size:12px}.axis{font-size:10px;fill:#616161}\
#map{display:grid;grid-auto-columns:256px;grid-auto-rows:256px;width:max-content;background:repeating-conic-gradient(#eee 0 25%,#fff 0 50%) 0 0/16px 16px}\
#map img{width:256px;height:256px;image-rendering:pixelated}\
#thumbnail{max-width:512px;image-rendering:pixelated;border:1px solid #e0e0e0;background:repeating-conic-gradient(#eee 0 25%,#fff 0 50%) 0 0/16px 16px}\
.note{color:#616161;font-size:12px}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64(&[0xff, 0xfe, 0x00]), "//4A");
    }

    #[test]
    fn markup_is_escaped() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
