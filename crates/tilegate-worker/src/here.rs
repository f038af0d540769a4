//! [`WindowsHere`]: the windows this pool is working on or has recorded, so that a second
//! message for the same window — left on the queue by an interrupted run and sent again by
//! its resume, or a duplicate delivery — is dropped before it is encoded rather than after.
//!
//! Across processes the store's create-if-absent write still decides (and a HEAD first, for a
//! message that may be a duplicate); this is what one pool knows for free. A message for a
//! window another handler of this pool is encoding waits for it: the window is then recorded
//! (the message is dropped) or its handler failed (the message is worked as usual).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use tilegate_core::{JobId, Window};
use tokio::sync::{Mutex as Turn, OwnedMutexGuard};

/// How many recorded windows a pool remembers (the oldest are forgotten first; a forgotten
/// window's duplicate is caught by the HEAD or the create-if-absent write instead).
const REMEMBERED: usize = 65_536;

type Key = (JobId, Window);

#[derive(Debug, Default)]
pub(crate) struct WindowsHere(Mutex<State>);

#[derive(Debug, Default)]
struct State {
    /// Windows being worked on: one handler at a time holds each turn.
    busy: HashMap<Key, Arc<Turn<()>>>,
    /// Windows recorded by this pool, and the order they were, for forgetting.
    recorded: HashSet<Key>,
    order: VecDeque<Key>,
}

/// Whether a handler works a window.
pub(crate) enum Here<'a> {
    /// This pool recorded it already: drop the message.
    Recorded,
    /// Work it; say [`WindowTurn::recorded`] once its manifest row is written.
    Work(WindowTurn<'a>),
}

/// A handler's turn at a window; the next handler for it goes on when this is dropped.
pub(crate) struct WindowTurn<'a> {
    here: &'a WindowsHere,
    key: Key,
    turn: Option<OwnedMutexGuard<()>>,
}

impl WindowsHere {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().expect("windows-here lock")
    }

    /// Take a turn at `window` of `job`, waiting while another handler of this pool has it.
    pub(crate) async fn begin(&self, job: &JobId, window: Window) -> Here<'_> {
        let key = (job.clone(), window);
        let turn = {
            let mut st = self.state();
            if st.recorded.contains(&key) {
                return Here::Recorded;
            }
            Arc::clone(st.busy.entry(key.clone()).or_default())
        };
        let turn = turn.lock_owned().await;
        let mut t = WindowTurn {
            here: self,
            key,
            turn: Some(turn),
        };
        if self.state().recorded.contains(&t.key) {
            t.release();
            return Here::Recorded;
        }
        Here::Work(t)
    }
}

impl WindowTurn<'_> {
    /// The window's manifest row is written: later messages for it are dropped.
    pub(crate) fn recorded(&self) {
        let mut st = self.here.state();
        if st.recorded.insert(self.key.clone()) {
            st.order.push_back(self.key.clone());
            while st.order.len() > REMEMBERED {
                if let Some(old) = st.order.pop_front() {
                    st.recorded.remove(&old);
                }
            }
        }
    }

    fn release(&mut self) {
        let Some(turn) = self.turn.take() else {
            return;
        };
        let mut st = self.here.state();
        // The map's reference and this turn's: nobody else is waiting, so the entry goes.
        if st
            .busy
            .get(&self.key)
            .is_some_and(|t| Arc::strong_count(t) <= 2)
        {
            st.busy.remove(&self.key);
        }
        drop(turn);
    }
}

impl Drop for WindowTurn<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> JobId {
        JobId::parse(&"ab".repeat(16)).expect("a job ID")
    }

    #[tokio::test]
    async fn a_recorded_window_is_dropped_and_a_failed_one_worked_again() {
        let here = WindowsHere::default();
        let w = Window::new(0, 1);
        let Here::Work(t) = here.begin(&job(), w).await else {
            panic!("first message works")
        };
        drop(t); // failed: not recorded
        let Here::Work(t) = here.begin(&job(), w).await else {
            panic!("a failed window is worked again")
        };
        t.recorded();
        drop(t);
        assert!(matches!(here.begin(&job(), w).await, Here::Recorded));
        assert!(here.state().busy.is_empty());
    }

    #[tokio::test]
    async fn a_second_message_waits_for_the_first() {
        let here = Arc::new(WindowsHere::default());
        let w = Window::new(2, 3);
        let Here::Work(first) = here.begin(&job(), w).await else {
            panic!("first message works")
        };
        let h = Arc::clone(&here);
        let second =
            tokio::spawn(async move { matches!(h.begin(&job(), w).await, Here::Recorded) });
        tokio::task::yield_now().await;
        assert!(!second.is_finished());
        first.recorded();
        drop(first);
        assert!(second.await.unwrap(), "the second message is dropped");
        assert!(here.state().busy.is_empty());
    }
}
