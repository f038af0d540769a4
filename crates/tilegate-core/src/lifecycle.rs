//! A job's state and its window counts, defined once. `status` (a job's detail and the
//! recent-jobs list), the report, the service's job documents and the run's summary all render
//! these two types, so one job never has two names or two sets of figures.

use serde::{Deserialize, Serialize};

/// Where a job is in its life, from its stored state: the job row, its manifest count, its
/// dead-lettered windows and whether a scene is published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Lifecycle {
    /// Planned; no window recorded or dead-lettered yet.
    Planned,
    /// Some windows are recorded and others are still to do: queued, in flight, or handed back
    /// by a run that stopped. Working the queue again (`tilegate work`, or `run` once more)
    /// resumes it.
    Partial,
    /// Nothing is left to do but dead-lettered windows: fix their cause (`tilegate dlq list`),
    /// then `tilegate dlq redrive` resumes the job.
    Incomplete,
    /// Every window is recorded and no scene is published yet: `tilegate assemble` publishes
    /// it (as a pool with `--assemble`, or the reconciler, does by itself). A job run with
    /// `--no-assemble` stays here.
    NotAssembled,
    /// The scene is published.
    Published,
}

impl Lifecycle {
    /// Every state, in the order a job moves through them.
    pub const ALL: [Self; 5] = [
        Self::Planned,
        Self::Partial,
        Self::Incomplete,
        Self::NotAssembled,
        Self::Published,
    ];

    /// The state's name, as every output prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Planned => "planned",
            Self::Partial => "partial",
            Self::Incomplete => "incomplete",
            Self::NotAssembled => "not_assembled",
            Self::Published => "published",
        }
    }

    /// A job's state from its counts and whether its scene is published (assembled, or
    /// regenerated and published by its pointer).
    pub fn of(counts: &Counts, published: bool) -> Self {
        if published {
            Self::Published
        } else if counts.complete() {
            Self::NotAssembled
        } else if counts.missing == 0 {
            // Not complete and nothing missing: every window left is dead-lettered.
            Self::Incomplete
        } else if counts.recorded == 0 && counts.dead_lettered == 0 {
            Self::Planned
        } else {
            Self::Partial
        }
    }

    /// What moves a job in this state on, for a person (`job` names it in the command).
    pub fn next_step(self, job: &str) -> String {
        match self {
            Self::Planned | Self::Partial => {
                "run again to resume: `tilegate work --until-empty` does them".to_owned()
            }
            Self::Incomplete => {
                "`tilegate dlq list`; fix the cause, then `tilegate dlq redrive` resumes it"
                    .to_owned()
            }
            Self::NotAssembled => format!("`tilegate assemble {job}` publishes the scene"),
            Self::Published => "the scene is published".to_owned(),
        }
    }
}

impl std::fmt::Display for Lifecycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A job's windows, counted once: every window is recorded, dead-lettered or missing, and the
/// three add up to `windows`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Counts {
    /// Windows of the job's grid.
    pub windows: u64,
    /// Windows with a manifest row.
    pub recorded: u64,
    /// Windows without a row whose message is dead-lettered.
    pub dead_lettered: u64,
    /// Windows with neither: still queued, in flight, or handed back by a run that stopped.
    pub missing: u64,
}

impl Counts {
    /// The counts of a job of `windows` windows with `recorded` manifest rows and
    /// `dead_lettered` dead letters. A dead letter of a window that has a row anyway (a
    /// duplicate recorded it) or a second letter of one window counts once at most: the
    /// dead-lettered windows are never more than those without a row.
    pub fn new(windows: u64, recorded: u64, dead_lettered: u64) -> Self {
        let recorded = recorded.min(windows);
        let dead_lettered = dead_lettered.min(windows - recorded);
        Self {
            windows,
            recorded,
            dead_lettered,
            missing: windows - recorded - dead_lettered,
        }
    }

    /// Every window is recorded.
    pub fn complete(&self) -> bool {
        self.recorded >= self.windows
    }

    /// Windows without a row (dead-lettered or missing).
    pub fn unrecorded(&self) -> u64 {
        self.windows - self.recorded
    }
}

/// What one run did to its job's windows: of the windows recorded when it ended, those whose
/// tile this run wrote and those already present (recorded before it, or written by a
/// duplicate first). `written + already_present == counts.recorded`, so neither figure can
/// exceed the job's windows however many duplicate messages the run absorbed.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct RunCounts {
    #[serde(flatten)]
    pub counts: Counts,
    /// Windows whose tile this run wrote.
    pub tiles_written: u64,
    /// Recorded windows this run did not write.
    pub already_present: u64,
}

impl RunCounts {
    /// From the job's windows, its rows before and after the run, the tiles the run wrote
    /// (its counter) and the windows it dead-lettered.
    pub fn new(
        windows: u64,
        recorded_before: u64,
        recorded_after: u64,
        tiles_written: u64,
        dead_lettered: u64,
    ) -> Self {
        let counts = Counts::new(windows, recorded_after, dead_lettered);
        let new_rows = counts.recorded.saturating_sub(recorded_before);
        let written = tiles_written.min(new_rows);
        Self {
            counts,
            tiles_written: written,
            already_present: counts.recorded - written,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_to_the_windows() {
        let c = Counts::new(441, 425, 40);
        assert_eq!((c.recorded, c.dead_lettered, c.missing), (425, 16, 0));
        assert_eq!(Lifecycle::of(&c, false), Lifecycle::Incomplete);
        let c = Counts::new(16, 0, 0);
        assert_eq!(Lifecycle::of(&c, false), Lifecycle::Planned);
        let c = Counts::new(16, 3, 0);
        assert_eq!(Lifecycle::of(&c, false), Lifecycle::Partial);
        let c = Counts::new(16, 16, 0);
        assert_eq!(Lifecycle::of(&c, false), Lifecycle::NotAssembled);
        assert_eq!(Lifecycle::of(&c, true), Lifecycle::Published);
    }

    #[test]
    fn a_run_never_writes_and_finds_more_than_the_windows() {
        // A resumed run whose windows were queued twice: 70 recorded before, 371 written, 371
        // duplicates absorbed.
        let r = RunCounts::new(441, 70, 441, 371, 0);
        assert_eq!((r.tiles_written, r.already_present), (371, 70));
        assert!(r.tiles_written + r.already_present <= r.counts.windows);
    }
}
