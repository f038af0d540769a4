//! Printing results: one JSON document with `--json`, readable text otherwise, and a progress
//! bar on stderr for long work (drawn only on a terminal). It names nothing else of the command
//! line: reports, commands and errors build on it.

use indicatif::{ProgressBar, ProgressStyle};
use schemars::JsonSchema;
use serde::Serialize;
use std::time::Duration;
use tilegate_core::lifecycle::Lifecycle;
use tilegate_core::metrics as m;
use tilegate_core::table::JobRecord;
use tilegate_core::time::with_utc;
use tilegate_core::{Backends, Reason};
use tilegate_report::status::JobStatus;

/// A command's result: its JSON document is the type itself, its text is [`Report::text`].
pub trait Report: Serialize {
    /// What a person reads; `out` says where the object keys live.
    fn text(&self, out: &Out) -> String;
}

/// A failure, as `--json` prints it: `{"error": {"reason": …, "message": …}}`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ErrorDoc {
    /// The stable reason code (README, "Reasons and exit statuses").
    pub reason: Reason,
    /// One line: the whole chain of causes, secrets redacted.
    pub message: String,
}

/// The document of a command that failed.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Failed {
    pub error: ErrorDoc,
}

/// One item of a list command (`plan --from`, `run --from`): done, or the source's failure.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Item<T> {
    Done(T),
    Failed {
        /// The source as given (secrets redacted).
        source: String,
        error: ErrorDoc,
    },
}

impl<T: Report> Item<T> {
    pub fn line(&self, out: &Out) -> String {
        match self {
            Self::Done(t) => t.text(out),
            Self::Failed { source, error } => {
                format!("error[{}] {source}: {}", error.reason, error.message)
            }
        }
    }
}

/// Where results go.
#[derive(Debug, Clone)]
pub struct Out {
    pub json: bool,
    /// Where object keys live, for people: a directory (`./tilegate-data/objects/`) or a URL.
    pub objects_root: String,
}

impl Out {
    pub fn new(json: bool, objects_root: String) -> Self {
        Self { json, objects_root }
    }

    /// Print `report` as JSON (with a readable copy of every time, [`with_utc`]), or its
    /// text, its secrets redacted ([`tilegate_core::redact`]: a dead letter's reason, a URI, an
    /// error's text).
    pub fn emit(&self, report: &impl Report) {
        println!("{}", tilegate_core::redact::redact(&self.render(report)));
    }

    /// [`Self::emit`] of a report whose point is a credential the operator asked for (a
    /// signed URL from `url`): printed as it is, never logged.
    pub fn emit_secret(&self, report: &impl Report) {
        println!("{}", self.render(report));
    }

    /// The report as `--json` prints it, else its text.
    pub fn render(&self, report: &impl Report) -> String {
        if self.json {
            self.json_of(report)
        } else {
            report.text(self)
        }
    }

    /// The report's JSON document, pretty-printed.
    pub fn json_of(&self, report: &impl Serialize) -> String {
        let doc = serde_json::to_value(report).expect("reports serialise");
        serde_json::to_string_pretty(&with_utc(doc)).expect("json documents serialise")
    }
}

/// What a job's run shows while its windows are worked: on a terminal, a bar following the
/// manifest count; on a pipe or a log, a line every [`PIPE_EVERY`] (`run … 2>log` is not
/// silent until the end); nothing with `--json`. When the scene is assembled next, finishing
/// it says so (a spinner on a terminal, a line elsewhere) until [`Ticker::done`].
pub struct Progress {
    bar: ProgressBar,
    /// The poller and its stop signal; none when nothing is shown (no count is read).
    poller: Option<(
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    )>,
    /// Said once the windows are done: the assembly that follows.
    then: Option<String>,
    /// Where the bar goes after [`Progress::finish`], for [`Ticker::done`].
    ticker: Ticker,
    poller_kind: PollerKind,
}

/// A spinner with a message and the time it has run: what a long step shows on a terminal.
pub fn spinner() -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").expect("valid template"),
    );
    bar
}

/// How often a run on a pipe says how far it is.
const PIPE_EVERY: Duration = Duration::from_secs(5);

/// What is left on screen after the windows: the assembly's spinner, cleared by
/// [`Ticker::done`] when the run returns. Cheap to clone.
#[derive(Clone, Default)]
pub struct Ticker(std::sync::Arc<std::sync::Mutex<Option<ProgressBar>>>);

impl Ticker {
    /// Clear whatever is still shown.
    pub fn done(&self) {
        if let Some(bar) = self.0.lock().expect("ticker").take() {
            bar.finish_and_clear();
        }
    }
}

impl Progress {
    /// Stop polling; say what comes next, if anything, or clear the bar. The poller is asked to
    /// stop, not aborted: a count in flight completes, so every request it started is one the
    /// store answered (and counted).
    pub async fn finish(self) {
        if let Some((stop, task)) = self.poller {
            let _ = stop.send(());
            let _ = task.await;
        }
        match (&self.then, self.bar.is_hidden()) {
            (Some(then), false) => {
                let spinner = spinner();
                spinner.set_message(then.clone());
                spinner.enable_steady_tick(Duration::from_millis(200));
                self.bar.finish_and_clear();
                *self.ticker.0.lock().expect("ticker") = Some(spinner);
            }
            (Some(then), true) if self.poller_kind == PollerKind::Lines => {
                eprintln!("tilegate: {then}");
            }
            _ => self.bar.finish_and_clear(),
        }
    }
}

impl tilegate_pipeline::run::Progress for Progress {
    async fn finish(self) {
        Progress::finish(self).await;
    }
}

/// Whether anything follows the count: a bar, lines, or nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PollerKind {
    Bar,
    Lines,
    Nothing,
}

/// Follow `job`'s windows (see [`Progress`]); `then`: what is said once they are done (the
/// assembly), kept on screen until `ticker` is done.
pub fn progress(
    out: &Out,
    b: Backends,
    job: &JobRecord,
    then: Option<String>,
    ticker: &Ticker,
) -> Progress {
    use std::io::IsTerminal as _;
    let kind = if out.json {
        PollerKind::Nothing
    } else if std::io::stderr().is_terminal() {
        PollerKind::Bar
    } else {
        PollerKind::Lines
    };
    let bar = if kind == PollerKind::Bar {
        ProgressBar::new(job.grid.len())
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} {pos}/{len} windows [{bar:40}] {rate} eta {eta}")
            .expect("valid template")
            .with_key(
                "rate",
                |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{:.1}/s", state.per_sec());
                },
            )
            .progress_chars("=> "),
    );
    let shown = Progress {
        bar: bar.clone(),
        poller: None,
        then,
        ticker: ticker.clone(),
        poller_kind: kind,
    };
    if kind == PollerKind::Nothing {
        return shown;
    }
    let (id, windows) = (job.job_id.clone(), job.grid.len());
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let mut said = started;
        loop {
            if let Ok(n) = b.manifest.count_entries(&id).await {
                bar.set_position(n);
                if kind == PollerKind::Lines && said.elapsed() >= PIPE_EVERY {
                    said = std::time::Instant::now();
                    eprintln!(
                        "tilegate: job {id}: {n}/{windows} windows recorded ({:.0} s)",
                        started.elapsed().as_secs_f64()
                    );
                }
            }
            tokio::select! {
                _ = &mut stopped => return,
                () = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
        }
    });
    Progress {
        poller: Some((stop, task)),
        ..shown
    }
}

/// `n` things: `1 window`, `4 windows`.
pub fn counted(n: u64, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// `status` as text, from the same [`JobStatus`] that `--json` prints: every count below is
/// a field of it, so the two cannot disagree.
pub fn status_text(st: &JobStatus, objects_root: &str) -> String {
    let states = &st.window_states;
    let c = &st.counts;
    let mut s = format!(
        "job {}\n  state        {}\n  source       {} {}\n  windows      {} of {} recorded",
        st.job_id,
        st.lifecycle.as_str(),
        st.source,
        st.source_etag,
        c.recorded,
        c.windows,
    );
    if c.unrecorded() > 0 {
        // Every window without a row is dead-lettered or still missing: the same two counts
        // as the states line, never a second figure for either.
        s.push_str(&format!(
            " ({} not: {} dead-lettered, {} missing)",
            c.unrecorded(),
            c.dead_lettered,
            c.missing
        ));
    }
    s.push('\n');
    if let Some(stall) = &st.stalled {
        s.push_str(&format!(
            "  stalled      {} ({}): `tilegate reconcile-jobs --once` moves it on\n",
            stall.reason.as_str(),
            stall.count
        ));
    }
    s.push_str(&format!(
        "  states       {} written, {} already present, {} encode skipped, {} dead-lettered, {} missing ({} duplicates absorbed)\n",
        states.written,
        states.already_present,
        states.encode_skipped,
        states.dead_lettered,
        states.missing,
        st.duplicates_absorbed,
    ));
    s.push_str(&format!(
        "  scene        {}\n",
        scene_line(st, objects_root)
    ));
    for (reason, count) in &st.dead_letters_by_reason {
        s.push_str(&format!("  dead letters {reason}: {count}\n"));
    }
    for a in &st.announcements {
        let to = if a.delivered.is_empty() && st.settled {
            format!(
                "kept: no sink took it (`tilegate announce {} --announce URL` delivers it)",
                st.job_id
            )
        } else if a.delivered.is_empty() {
            "pending: no sink has taken it yet".to_owned()
        } else {
            format!(
                "delivered to {}",
                a.delivered.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        };
        s.push_str(&format!(
            "  announced    {} ({}), {to}\n",
            a.outcome.as_str(),
            a.key
        ));
    }
    for w in &st.workers {
        s.push_str(&format!(
            "  worker       {} recorded {} window(s)\n",
            w.worker, w.windows
        ));
    }
    if !st.missing.is_empty() {
        let names: Vec<&str> = st.missing.iter().map(String::as_str).take(10).collect();
        s.push_str(&format!(
            "  missing      {}{}\n",
            names.join(" "),
            if st.missing.len() > 10 { " …" } else { "" }
        ));
    }
    let l = &st.ledger;
    if l.attempts > 0 {
        let states = l
            .by_state
            .iter()
            .filter(|(_, v)| **v != 0)
            .map(|(k, v)| format!("{v} {k}"))
            .collect::<Vec<_>>()
            .join(", ");
        s.push_str(&format!(
            "  attempts     {} ({states}); {} window(s) published by pointer; oldest overdue deletion {} s\n",
            l.attempts, l.published, l.deletion_overdue_oldest_seconds
        ));
    }
    let q = st.queue.unwrap_or_default();
    s.push_str(&format!(
        "  queue        {} visible, {} in flight, {} dead ({} of this job)\n  counters\n",
        q.visible, q.in_flight, q.dead, st.dead_letters_for_job
    ));
    // Request and byte counts are summed here; `--cost` lists them by operation.
    for (k, v) in st.counters.iter().filter(|(k, _)| {
        !k.starts_with(m::REQUESTS)
            && !k.starts_with(m::BYTES_SENT)
            && !k.starts_with(m::BYTES_RECEIVED)
    }) {
        s.push_str(&format!("    {k:<46}{v:>8}\n"));
    }
    s.push_str(&format!(
        "  requests     {} counted for this job; estimated {:.6} {} (status --cost for the lines)\n",
        st.cost.requests, st.cost.total_usd, st.cost.currency,
    ));
    s.trim_end().to_owned()
}

/// Where the job's scene is, or what stands between the job and it.
fn scene_line(st: &JobStatus, objects_root: &str) -> String {
    match &st.published_scene {
        Some(p) => match &p.attempt {
            None => format!("{objects_root}{} ({} bytes)", p.output.key, p.output.size),
            Some(attempt) => format!(
                "{objects_root}{} ({} bytes; regenerated, attempt {attempt}; assembled first as {})",
                p.output.key,
                p.output.size,
                st.scene_output.as_ref().map_or("-", |o| o.key.as_str())
            ),
        },
        // Not published: what the job's state says stands between it and its scene.
        None => match st.lifecycle {
            Lifecycle::NotAssembled | Lifecycle::Published => format!(
                "not assembled yet: every window is recorded; {}",
                st.lifecycle.next_step(st.job_id.as_str())
            ),
            Lifecycle::Incomplete => format!(
                "not assembled: {} window(s) dead-lettered ({})",
                st.counts.dead_lettered,
                st.lifecycle.next_step(st.job_id.as_str())
            ),
            Lifecycle::Planned | Lifecycle::Partial => format!(
                "not assembled: {} window(s) still to do{} ({})",
                st.counts.missing,
                match st.counts.dead_lettered {
                    0 => String::new(),
                    n => format!(", {n} dead-lettered (`tilegate dlq list`)"),
                },
                st.lifecycle.next_step(st.job_id.as_str())
            ),
        },
    }
}
