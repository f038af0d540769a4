//! The conformance suite run against the embedded backend: a local directory for objects, one
//! SQLite file for tables and queues — a fresh pair per test. Other processes open the same
//! pair for the cross-process races.

use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;
use tilegate_conformance::{Capabilities, ChildUrls, Harness, ObjectHarness, conformance_suite};
use tilegate_core::object::ObjectStore;
use tilegate_core::queue::WorkQueue;
use tilegate_core::table::{ClaimTable, CounterTable, JobTable, ManifestTable};
use tilegate_embedded::{LocalObjectStore, SqliteBackend};

struct Embedded {
    objects: LocalObjectStore,
    db: SqliteBackend,
    /// The temporary directory a harness owns (a child process's stores are its parent's).
    _dir: Option<tempfile::TempDir>,
}

/// A fresh embedded backend in a temporary directory.
async fn harness() -> Arc<dyn Harness> {
    let dir = tilegate_conformance::tempdir();
    let objects = LocalObjectStore::open(dir.path().join("objects")).expect("open local store");
    let db = SqliteBackend::open(dir.path().join("tilegate.db")).expect("open sqlite");
    Arc::new(Embedded {
        objects,
        db,
        _dir: Some(dir),
    })
}

/// In a child process: the stores of the harness whose [`ChildUrls`] it was given.
async fn reopen(urls: &ChildUrls) -> Arc<dyn Harness> {
    let dir = urls.objects.strip_prefix("file://").expect("a file:// URL");
    let file = urls
        .tables
        .strip_prefix("sqlite://")
        .expect("a sqlite:// URL");
    Arc::new(Embedded {
        objects: LocalObjectStore::open(dir).expect("open local store"),
        db: SqliteBackend::open(file).expect("open sqlite"),
        _dir: None,
    })
}

#[async_trait]
impl ObjectHarness for Embedded {
    fn caps(&self) -> Capabilities {
        Capabilities {
            cross_process: true,
            // The store pushes a rewrite's mtime past the previous one's.
            last_modified_resolution: Duration::ZERO,
            min_part_size: 0,
            exclusive_receive: true,
            parts_in_any_order: true,
            completion_unenforced: None,
        }
    }

    fn objects(&self) -> Arc<dyn ObjectStore> {
        Arc::new(self.objects.clone())
    }

    fn child_urls(&self) -> Option<ChildUrls> {
        Some(ChildUrls {
            objects: format!("file://{}", self.objects.root().display()),
            tables: format!("sqlite://{}", self.db.path().display()),
        })
    }

    fn upstream(&self) -> Result<String, &'static str> {
        Err(
            "the local store's Create is link(2) in this process: no answer travels that could \
             be lost",
        )
    }
}

#[async_trait]
impl Harness for Embedded {
    fn jobs(&self) -> Arc<dyn JobTable> {
        Arc::new(self.db.clone())
    }

    fn manifest(&self) -> Arc<dyn ManifestTable> {
        Arc::new(self.db.clone())
    }

    fn claims(&self) -> Arc<dyn ClaimTable> {
        Arc::new(self.db.clone())
    }

    fn counters(&self) -> Arc<dyn CounterTable> {
        Arc::new(self.db.clone())
    }

    fn ledger(&self) -> Arc<dyn tilegate_core::ledger::LedgerTable> {
        Arc::new(self.db.clone())
    }

    async fn queue(&self, name: &str, max_receive_count: u32) -> Arc<dyn WorkQueue> {
        Arc::new(self.db.queue(name, max_receive_count))
    }
}

conformance_suite!(harness, child: reopen);
