//! Cross-process races: the suite runs its own test binary again as child processes, each of
//! which opens the backend's stores (through the `child:` opener given to
//! [`conformance_suite!`](crate::conformance_suite)), performs one storage operation and prints
//! the outcome — so a backend outside this repository needs no helper binary of its own.
//!
//! Every child opens its stores, prints `ready`, waits until the start-barrier file exists — so
//! that all children race at the same instant — then acts and prints its outcome as the last
//! line. Commands (the arguments of one child):
//!
//! - `create-race <key> <payload>` → `written` | `already-present`
//! - `cas-increment <key> <times>` → `done <refused updates>`
//! - `claim-race <resource> <owner>` → `acquired <token>` | `existing <holder>`
//! - `queue-drain <queue>` → one message ID per line, then `drained <n>`
//!
//! A child is the test `conformance_child` run alone (`--exact`), told what to do through
//! environment variables; its lines carry a prefix, as libtest prints lines of its own.

use crate::{Harness, object_key};
use bytes::Bytes;
use std::future::Future;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tilegate_core::object::{ObjectStoreExt as _, PutOutcome, UpdateVersion};
use tilegate_core::table::AcquireOutcome;

/// How a child process opens a harness's stores: locations the backend's `child:` opener
/// understands (the embedded backend's are `file://<dir>` and `sqlite://<file>`).
#[derive(Debug, Clone)]
pub struct ChildUrls {
    pub objects: String,
    pub tables: String,
}

const ARGS: &str = "TILEGATE_CONFORMANCE_CHILD";
const OBJECTS: &str = "TILEGATE_CONFORMANCE_CHILD_OBJECTS";
const TABLES: &str = "TILEGATE_CONFORMANCE_CHILD_TABLES";
const BARRIER: &str = "TILEGATE_CONFORMANCE_CHILD_BARRIER";
/// Separates the child's arguments in [`ARGS`].
const SEP: char = '\u{1f}';
/// Marks the child's own lines among libtest's.
const PREFIX: &str = "tilegate-conformance-child: ";

static ENTRY: Mutex<Option<String>> = Mutex::new(None);

/// Record which test of this binary serves as the child (`None`: the backend gave no `child:`
/// opener). The tests [`conformance_suite!`](crate::conformance_suite) expands to call it.
pub fn set_entry(entry: Option<String>) {
    *ENTRY.lock().unwrap_or_else(PoisonError::into_inner) = entry;
}

/// libtest's name of the test `name` in the module `module_path` (which starts with the
/// crate's name; libtest's names do not).
pub fn test_name(module_path: &str, name: &str) -> String {
    match module_path.split_once("::") {
        Some((_, module)) => format!("{module}::{name}"),
        None => name.to_owned(),
    }
}

/// Run this test binary once per argument list as a child on the stores `urls` names, all
/// released at the same instant: once every child has said `ready` the barrier is created.
/// Returns the lines each child printed after `ready`, in order (the last one is its outcome).
pub async fn run_children(
    urls: &ChildUrls,
    arg_lists: Vec<Vec<String>>,
    barrier: &Path,
) -> Vec<Vec<String>> {
    let entry = ENTRY
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .expect(
            "the harness declares cross_process, but the suite was given no `child:` opener \
             (conformance_suite!(harness, child: reopen))",
        );
    let (urls, barrier) = (urls.clone(), barrier.to_path_buf());
    tokio::task::spawn_blocking(move || {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut children = Vec::new();
        for args in &arg_lists {
            let mut child = Command::new(&exe)
                .args([entry.as_str(), "--exact", "--nocapture", "--test-threads=1"])
                .env(ARGS, args.join(&SEP.to_string()))
                .env(OBJECTS, &urls.objects)
                .env(TABLES, &urls.tables)
                .env(BARRIER, &barrier)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn the child test process");
            let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
            loop {
                let mut line = String::new();
                let n = out.read_line(&mut line).expect("read child's ready line");
                assert!(n > 0, "child {args:?} ended before it was ready");
                if own_line(&line) == Some("ready") {
                    break;
                }
            }
            children.push((child, out, args.clone()));
        }
        std::fs::write(&barrier, b"go").expect("create the start barrier");
        let mut outcomes = Vec::new();
        for (mut child, mut out, args) in children {
            let mut rest = String::new();
            std::io::Read::read_to_string(&mut out, &mut rest).expect("read child's outcome");
            let status = child.wait().expect("wait for child");
            assert!(
                status.success(),
                "child {args:?} failed: {status}; said {rest:?}"
            );
            outcomes.push(
                rest.lines()
                    .filter_map(own_line)
                    .map(str::to_owned)
                    .collect(),
            );
        }
        outcomes
    })
    .await
    .expect("child runner")
}

/// The body of the `conformance_child` test: nothing, unless [`run_children`] started this
/// process; then open the stores with `reopen`, perform the command and print its outcome.
pub fn serve_if_asked(
    reopen: impl FnOnce(ChildUrls) -> Pin<Box<dyn Future<Output = Arc<dyn Harness>>>>,
) {
    let Ok(args) = std::env::var(ARGS) else {
        eprintln!(
            "conformance_child: nothing to do (the suite's cross-process tests run it as their \
             child process)"
        );
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is unset"));
    let urls = ChildUrls {
        objects: var(OBJECTS),
        tables: var(TABLES),
    };
    let barrier = PathBuf::from(var(BARRIER));
    let args: Vec<String> = args.split(SEP).map(str::to_owned).collect();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("build the child's runtime")
        .block_on(async move {
            let h = reopen(urls).await;
            run(&*h, &args, &barrier).await;
        });
}

/// A line the child printed itself, without the prefix: libtest may have begun the line
/// (`test conformance_child ... `).
fn own_line(line: &str) -> Option<&str> {
    line.split_once(PREFIX).map(|(_, own)| own.trim())
}

fn say(line: impl std::fmt::Display) {
    println!("{PREFIX}{line}");
}

/// Say `ready`, then spin until the barrier file exists (at most a minute).
fn ready_then_wait(barrier: &Path) {
    say("ready");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !barrier.exists() {
        assert!(
            Instant::now() <= deadline,
            "barrier {} never appeared",
            barrier.display()
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

async fn run(h: &dyn Harness, args: &[String], barrier: &Path) {
    let arg = |i: usize| -> &str {
        args.get(i)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("missing argument {i} in {args:?}"))
    };
    match arg(0) {
        "create-race" => {
            let s = h.objects();
            let (key, payload) = (arg(1), arg(2).to_owned());
            ready_then_wait(barrier);
            match s.put_create(&object_key(key), Bytes::from(payload)).await {
                Ok(PutOutcome::Written(_)) => say("written"),
                Ok(PutOutcome::AlreadyPresent) => say("already-present"),
                Ok(PutOutcome::Superseded) => say("superseded"),
                Err(e) => panic!("create {key}: {e:?}"),
            }
        }
        "cas-increment" => {
            let s = h.objects();
            let key = object_key(arg(1));
            let times: u32 = arg(2).parse().expect("a count");
            ready_then_wait(barrier);
            let mut refused = 0u64;
            for _ in 0..times {
                loop {
                    let cur = s.get_bytes(&key).await.expect("read the counter");
                    let n: u64 = std::str::from_utf8(&cur.bytes)
                        .expect("a UTF-8 counter")
                        .parse()
                        .expect("a number");
                    let next = Bytes::from((n + 1).to_string());
                    match s
                        .put_update(&key, next, UpdateVersion::from(&cur.meta))
                        .await
                        .expect("update the counter")
                    {
                        PutOutcome::Written(_) => break,
                        PutOutcome::Superseded => refused += 1,
                        PutOutcome::AlreadyPresent => panic!("update said already-present"),
                    }
                }
            }
            say(format!("done {refused}"));
        }
        "claim-race" => {
            let claims = h.claims();
            let (resource, owner) = (arg(1), arg(2));
            ready_then_wait(barrier);
            let now = tilegate_core::now_millis();
            match claims
                .acquire(resource, owner, now, now + 60_000)
                .await
                .expect("acquire the claim")
            {
                AcquireOutcome::Acquired(v) => say(format!("acquired {}", v.row.fencing_token)),
                AcquireOutcome::Existing(v) => say(format!("existing {}", v.row.owner)),
            }
        }
        "queue-drain" => {
            let q = h.queue(arg(1), 3).await;
            ready_then_wait(barrier);
            let opts = tilegate_core::queue::ReceiveOptions {
                max: 3,
                wait: Duration::from_millis(300),
                visibility: Duration::from_secs(120),
            };
            let mut n = 0usize;
            loop {
                let got = q.receive(opts).await.expect("receive");
                if got.is_empty() {
                    break;
                }
                for m in got {
                    say(&m.message_id);
                    q.ack(&m.receipt).await.expect("ack");
                    n += 1;
                }
            }
            say(format!("drained {n}"));
        }
        other => panic!("unknown child command `{other}`"),
    }
}
