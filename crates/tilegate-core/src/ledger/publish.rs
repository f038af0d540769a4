//! A publish's rules: who may move a pointer onto which attempt ([`PublishBy`]), decided by
//! [`Publish::decide`] from the rows a backend read, and what came of it ([`PublishOutcome`]).

use super::{AttemptId, AttemptRow, Pointer, Subject};
use crate::UnixMillis;
use crate::id::JobId;
use crate::table::Versioned;
use serde::{Deserialize, Serialize};

/// Where an attempt stands in the order attempts were begun ([`AttemptRow::begun`]).
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Begun {
    pub created_at: UnixMillis,
    pub attempt: AttemptId,
}

impl Begun {
    pub fn of(row: &AttemptRow) -> Self {
        Self {
            created_at: row.created_at,
            attempt: row.attempt.clone(),
        }
    }
}

/// Who asks for a publish, which decides what it may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PublishBy {
    /// An explicit accept (the `accept` command): may move the pointer onto any publishable
    /// attempt — back onto a retired one, or onto an older one — as the operator decided.
    Explicit,
    /// An order carried with a regeneration (a queue message, a `regenerate` that accepts,
    /// and every redelivery or re-run of them): publishes only an attempt that was never
    /// published, and never one begun before the newest the pointer has named. A returning
    /// order therefore cannot move the pointer back.
    #[default]
    Order,
}

/// A request to move a pointer onto an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    pub job_id: JobId,
    pub subject: Subject,
    pub attempt: AttemptId,
    /// The attempt the caller saw the pointer at (`None`: no pointer). The move happens only
    /// if the pointer is still there.
    pub seen: Option<AttemptId>,
    pub now: UnixMillis,
    pub by: PublishBy,
}

impl Publish {
    /// The rules of a publish, applied by every backend to the rows it read (and then writes
    /// conditionally on their versions): the pointer still at `seen` is the backend's own
    /// compare-and-swap; this decides the rest. `new` is the attempt's row, `current` the
    /// pointer and `seen_row` the row it names. Returns the pointer to write, or the outcome
    /// that refuses the move (boxed: it carries rows).
    pub fn decide(
        &self,
        new: Option<&Versioned<AttemptRow>>,
        current: Option<&Versioned<Pointer>>,
        seen_row: Option<&AttemptRow>,
    ) -> Result<Pointer, Box<PublishOutcome>> {
        let refused = || Box::new(PublishOutcome::NotPublishable(new.cloned()));
        let Some(row) = new.map(|n| &n.row).filter(|r| r.publishable()) else {
            return Err(refused());
        };
        let output = row.output().ok_or_else(refused)?;
        let newest = current
            .and_then(|c| c.row.newest.clone())
            .into_iter()
            .chain(seen_row.map(Begun::of))
            .max();
        let this = Begun::of(row);
        if self.by == PublishBy::Order {
            if row.ever_published() {
                return Err(refused());
            }
            if newest.as_ref().is_some_and(|n| this <= *n) {
                return Err(Box::new(PublishOutcome::Outdated {
                    current: current.cloned(),
                }));
            }
        }
        Ok(Pointer {
            tenant: row.tenant.clone(),
            job_id: self.job_id.clone(),
            subject: self.subject,
            attempt: self.attempt.clone(),
            output,
            moved_at: self.now,
            newest: newest.into_iter().chain([this]).max(),
        })
    }
}

/// What a publish writes, in one atomic step conditional on the versions read: the pointer,
/// the attempt's row accepted and the row the pointer named retired, each with the version it
/// was read at.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishWrites {
    pub pointer: Pointer,
    pub accepted: Versioned<AttemptRow>,
    pub retired: Option<Versioned<AttemptRow>>,
}

impl Publish {
    /// The whole of a publish but its reads and its write, shared by every backend: `current`
    /// is the pointer, `new` the attempt's row and `seen_row` the row of the attempt the caller
    /// saw the pointer at (read when `seen` names one; `None` there is a lost row). Returns the
    /// writes, or the outcome that refuses the move — `Superseded` when the pointer is no
    /// longer at `seen` — or `Err(None)` when the pointer names an attempt with no row.
    pub fn plan(
        &self,
        current: Option<&Versioned<Pointer>>,
        new: Option<&Versioned<AttemptRow>>,
        seen_row: Option<&Versioned<AttemptRow>>,
    ) -> Result<PublishWrites, Option<Box<PublishOutcome>>> {
        if let Some(refused) = self.superseded(current) {
            return Err(Some(Box::new(refused)));
        }
        if self.seen.is_some() && seen_row.is_none() {
            return Err(None);
        }
        let pointer = self
            .decide(new, current, seen_row.map(|r| &r.row))
            .map_err(Some)?;
        let new = new.expect("decide refuses a missing row");
        Ok(PublishWrites {
            pointer,
            accepted: Versioned {
                version: new.version,
                row: new.row.accepted(self.now),
            },
            retired: seen_row.map(|r| Versioned {
                version: r.version,
                row: r.row.retired(self.now),
            }),
        })
    }

    /// `Superseded` when the pointer (`current`) is no longer at the attempt the caller saw.
    pub fn superseded(&self, current: Option<&Versioned<Pointer>>) -> Option<PublishOutcome> {
        (current.map(|c| &c.row.attempt) != self.seen.as_ref()).then(|| {
            PublishOutcome::Superseded {
                current: current.cloned(),
            }
        })
    }

    /// The row of the attempt the caller saw the pointer at, named for an error.
    pub fn seen_shown(&self) -> String {
        let seen = self.seen.as_ref().map_or("-", AttemptId::as_str);
        format!("{}/{}/{seen}", self.job_id, self.subject)
    }

    /// The outcome of writes that landed.
    pub fn published(&self) -> PublishOutcome {
        PublishOutcome::Published {
            previous: self.seen.clone(),
        }
    }
}

/// The result of [`LedgerTable::publish`].
#[derive(Debug, Clone, PartialEq)]
pub enum PublishOutcome {
    /// The pointer moved; `previous` was retired in the same write.
    Published { previous: Option<AttemptId> },
    /// The pointer is no longer at the attempt the caller saw; nothing changed.
    Superseded { current: Option<Versioned<Pointer>> },
    /// The attempt cannot be published in its state (uploading, deleted, being swept, already
    /// accepted — or, asked by an order, published before) or has no row; nothing changed.
    NotPublishable(Option<Versioned<AttemptRow>>),
    /// Asked by an order: an attempt begun after this one is (or was) published; the pointer
    /// does not move back. Nothing changed.
    Outdated { current: Option<Versioned<Pointer>> },
    /// Asked explicitly: the pointer already names the attempt (whatever `seen` said);
    /// nothing changed, and nothing needed to.
    AlreadyCurrent { current: Versioned<Pointer> },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etag::ETag;
    use crate::ledger::tests::row;

    fn v(row: AttemptRow) -> Versioned<AttemptRow> {
        Versioned { version: 1, row }
    }

    fn at(created: UnixMillis, n: u128) -> AttemptRow {
        AttemptRow {
            created_at: created,
            attempt: AttemptId::from_random(n),
            ..row()
        }
        .uploaded(5, ETag::new("\"e\""), created)
    }

    fn publish(a: &AttemptRow, by: PublishBy) -> Publish {
        Publish {
            job_id: a.job_id.clone(),
            subject: a.subject,
            attempt: a.attempt.clone(),
            seen: None,
            now: 99,
            by,
        }
    }

    #[test]
    fn an_order_publishes_only_forward() {
        let (old, new) = (at(10, 1), at(20, 2));
        let pointer = |a: &AttemptRow| Versioned {
            version: 1,
            row: publish(a, PublishBy::Explicit)
                .decide(Some(&v(a.clone())), None, None)
                .unwrap(),
        };
        let on_new = pointer(&new);
        assert_eq!(on_new.row.newest, Some(Begun::of(&new)));
        // Older than the attempt the pointer names: outdated for an order, fine when explicit.
        assert!(matches!(
            publish(&old, PublishBy::Order).decide(
                Some(&v(old.clone())),
                Some(&on_new),
                Some(&new)
            ),
            Err(o) if matches!(*o, PublishOutcome::Outdated { .. })
        ));
        let back = publish(&old, PublishBy::Explicit)
            .decide(Some(&v(old.clone())), Some(&on_new), Some(&new))
            .unwrap();
        assert_eq!(
            back.newest,
            Some(Begun::of(&new)),
            "the newest stays the bar"
        );
        // Published before (retired now): refused to an order, even if it is the newest.
        let retired = new.accepted(30).retired(40);
        assert!(retired.ever_published());
        assert!(matches!(
            publish(&retired, PublishBy::Order).decide(Some(&v(retired.clone())), None, None),
            Err(o) if matches!(*o, PublishOutcome::NotPublishable(Some(_)))
        ));
        assert!(
            publish(&retired, PublishBy::Explicit)
                .decide(Some(&v(retired.clone())), None, None)
                .is_ok()
        );
        // A newer attempt's order goes through.
        let newer = at(30, 3);
        let p = publish(&newer, PublishBy::Order)
            .decide(Some(&v(newer.clone())), Some(&on_new), Some(&new))
            .unwrap();
        assert_eq!(p.newest, Some(Begun::of(&newer)));
        // Ties in time are ordered by attempt ID.
        let twin = at(20, 1);
        assert!(
            publish(&twin, PublishBy::Order)
                .decide(Some(&v(twin.clone())), Some(&on_new), Some(&new))
                .is_err()
        );
    }
}
