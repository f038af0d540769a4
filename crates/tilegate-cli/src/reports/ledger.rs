//! The reports of the ledger's commands: regenerate, accept, attempts, hold, gc, reconcile,
//! url.

use super::Report;
use crate::output::Out;
use schemars::JsonSchema;
use serde::Serialize;
use std::collections::BTreeMap;
use tilegate_core::ledger::Pointer;
use tilegate_core::table::Versioned;
use tilegate_core::{JobId, UnixMillis};

/// What a publish did to the subject's pointer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum PublishDoc {
    /// The pointer names the attempt now; `previous` is retired.
    Published { previous: Option<String> },
    /// The pointer moved meanwhile (a `--seen` that was not current).
    Superseded { current: Option<String> },
    /// The attempt's state does not allow it.
    NotPublishable {
        state: Option<String>,
        published_before: bool,
    },
    /// A newer attempt is published; only `accept` moves the pointer back.
    Outdated { current: Option<String> },
    /// The pointer already names the attempt: nothing changed, nothing needed to.
    AlreadyCurrent { current: String },
}

impl PublishDoc {
    pub fn of(o: &tilegate_core::ledger::PublishOutcome) -> Self {
        use tilegate_core::ledger::PublishOutcome as P;
        let attempt =
            |c: &Option<Versioned<Pointer>>| c.as_ref().map(|c| c.row.attempt.to_string());
        match o {
            P::Published { previous } => Self::Published {
                previous: previous.as_ref().map(ToString::to_string),
            },
            P::Superseded { current } => Self::Superseded {
                current: attempt(current),
            },
            P::NotPublishable(row) => Self::NotPublishable {
                state: row.as_ref().map(|r| r.row.state.name().to_owned()),
                published_before: row.as_ref().is_some_and(|r| r.row.ever_published()),
            },
            P::Outdated { current } => Self::Outdated {
                current: attempt(current),
            },
            P::AlreadyCurrent { current } => Self::AlreadyCurrent {
                current: current.row.attempt.to_string(),
            },
        }
    }
}

/// `regenerate`: the new attempt, uploaded (and published unless `--no-accept`) or enqueued.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RegenerateReport {
    pub job_id: JobId,
    /// `ROW_COL` or `scene`.
    pub subject: String,
    pub attempt: String,
    pub key: String,
    pub state: String,
    /// True with `--enqueue`: a worker uploads it.
    pub enqueued: bool,
    pub size: Option<u64>,
    pub e_tag: Option<String>,
    pub delete_after: Option<UnixMillis>,
    /// What publishing did; none with `--no-accept` or `--enqueue`.
    pub publish: Option<PublishDoc>,
    /// True when the attempt's bytes are those of the attempt it replaced (the source and
    /// recipe are unchanged): regenerating is for a changed source, a repaired tile or a new
    /// encoder, and this one changed nothing a reader sees.
    pub same_bytes_as_previous: bool,
    #[serde(skip)]
    pub publish_text: String,
}

impl Report for RegenerateReport {
    fn text(&self, _: &Out) -> String {
        if self.enqueued {
            return format!(
                "attempt {} of {} enqueued (key {})",
                self.attempt, self.subject, self.key
            );
        }
        let mut s = format!(
            "attempt {} of {} uploaded to {}; {}",
            self.attempt, self.subject, self.key, self.publish_text
        );
        if self.same_bytes_as_previous {
            s.push_str(
                "\n  note: the same bytes as the attempt it replaces (the source and recipe are \
                 unchanged); regenerating is for a changed source, a repaired window or a new \
                 encoder",
            );
        }
        s
    }
}

/// `accept`: what publishing the attempt did.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AcceptReport {
    pub job_id: JobId,
    pub subject: String,
    pub attempt: String,
    pub publish: PublishDoc,
    #[serde(skip)]
    pub publish_text: String,
}

impl Report for AcceptReport {
    fn text(&self, _: &Out) -> String {
        format!("attempt {}: {}", self.attempt, self.publish_text)
    }
}

/// `attempts`: a job's attempts and pointers.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AttemptsReport {
    pub job_id: JobId,
    pub tenant: String,
    pub attempts: Vec<tilegate_core::ledger::AttemptRow>,
    pub pointers: Vec<Pointer>,
    pub by_state: BTreeMap<&'static str, u64>,
}

impl Report for AttemptsReport {
    fn text(&self, _: &Out) -> String {
        let time = |ms: Option<UnixMillis>| ms.map_or("-".to_owned(), tilegate_core::time::rfc3339);
        let mut t = format!(
            "job {} (tenant {}): {} attempt(s), {} published\n",
            self.job_id,
            self.tenant,
            self.attempts.len(),
            self.pointers.len()
        );
        for r in &self.attempts {
            t.push_str(&format!(
                "  {} {} {:<9} delete after {} hold={} {}\n",
                r.subject,
                r.attempt,
                r.state.name(),
                time(r.delete_after),
                r.legal_hold,
                r.key
            ));
        }
        for p in &self.pointers {
            t.push_str(&format!(
                "  pointer {} -> {} (moved {})\n",
                p.subject,
                p.attempt,
                time(Some(p.moved_at))
            ));
        }
        t.trim_end().to_owned()
    }
}

/// `hold`: the attempt's legal hold, set or released.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct HoldReport {
    pub attempt: String,
    pub legal_hold: bool,
    pub state: String,
    pub key: String,
}

impl Report for HoldReport {
    fn text(&self, _: &Out) -> String {
        format!(
            "attempt {}: legal hold {}",
            self.attempt,
            if self.legal_hold { "set" } else { "released" }
        )
    }
}

/// `gc`: what the pass did, and the oldest overdue deletion left.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct GcCmdReport {
    #[serde(flatten)]
    pub gc: tilegate_ledger::gc::GcReport,
    pub deletion_overdue_oldest_seconds: u64,
}

impl Report for GcCmdReport {
    fn text(&self, _: &Out) -> String {
        let r = &self.gc;
        if r.dry_run {
            let mut t = format!("dry run: {} due row(s) would be deleted", r.items.len());
            for i in &r.items {
                t.push_str(&format!("\n  {} ({})", i.key, i.state));
            }
            t
        } else {
            format!(
                "gc: {} due, {} marked, {} deleted ({} already absent), {} skipped (changed), {} \
                 skipped (object differs); oldest overdue {} s",
                r.due,
                r.marked,
                r.deleted,
                r.already_absent,
                r.skipped_changed,
                r.skipped_mismatch,
                self.deletion_overdue_oldest_seconds
            )
        }
    }
}

impl Report for tilegate_ledger::reconcile::ReconcileReport {
    fn text(&self, _: &Out) -> String {
        let mut t = format!(
            "job {}: {} object(s), {} row(s): {} orphan(s), {} missing, {} mismatched",
            self.job_id,
            self.objects,
            self.rows,
            self.orphans.len(),
            self.missing.len(),
            self.mismatched.len()
        );
        // Keys shown escaped (`\u{..}`, `\t`) so that what is printed is unambiguous; --json
        // carries them byte for byte.
        for o in &self.orphans {
            t.push_str(&format!("\n  orphan   {:?} ({} bytes)", o.key, o.size));
        }
        for m in &self.missing {
            t.push_str(&format!("\n  missing  {:?} ({} row)", m.key, m.table));
        }
        for m in &self.mismatched {
            t.push_str(&format!(
                "\n  mismatch {:?}: row {} bytes {}, object {} bytes {}",
                m.key, m.row_size, m.row_e_tag, m.object_size, m.object_e_tag
            ));
        }
        t
    }
}

impl Report for tilegate_ledger::url::Grant {
    fn text(&self, _: &Out) -> String {
        self.url.clone()
    }
}
