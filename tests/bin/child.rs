//! A child process for cross-process tests: performs one storage operation named by its
//! arguments and prints the outcome on stdout.
//!
//! Every command opens its stores, prints `ready`, waits until the start-barrier file (its last
//! argument) exists — so that all children race at the same instant — then acts and prints its
//! outcome as the last line:
//!
//! - `create-race <objects-url> <key> <payload> <barrier>` → `written` | `already-present`
//! - `cas-increment <objects-url> <key> <times> <barrier>` → `done <refused updates>`
//! - `claim-race <tables-url> <resource> <owner> <barrier>` → `acquired <token>` |
//!   `existing <holder>`
//! - `queue-drain <tables-url> <queue> <barrier>` → one message ID per line, then `drained <n>`
//! - `put-loop <objects-url> <prefix> <barrier>` → never returns: Creates `<prefix>/obj-<i>`
//!   for i = 0, 1, … and replaces `<prefix>/shared` by compare-and-swap after each, every
//!   payload self-checking ([`tilegate_tests::crash_payload`]); the test kills it mid-write.
//!
//! URLs: `file://<dir>` (local object store), `sqlite://<file>` (tables and queues).

use bytes::Bytes;
use std::error::Error;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tilegate_core::object::{ObjectStore as _, ObjectStoreExt as _, PutOutcome, UpdateVersion};
use tilegate_core::queue::{ReceiveOptions, WorkQueue as _};
use tilegate_core::table::{AcquireOutcome, ClaimTable as _};
use tilegate_embedded::{LocalObjectStore, SqliteBackend};
use tilegate_tests::object_key;

type Res<T> = Result<T, Box<dyn Error>>;

fn objects(url: &str) -> Res<LocalObjectStore> {
    let dir = url
        .strip_prefix("file://")
        .ok_or_else(|| format!("unsupported object store URL `{url}` (want file://)"))?;
    Ok(LocalObjectStore::open(dir)?)
}

fn tables(url: &str) -> Res<SqliteBackend> {
    let file = url
        .strip_prefix("sqlite://")
        .ok_or_else(|| format!("unsupported table URL `{url}` (want sqlite://)"))?;
    Ok(SqliteBackend::open(file)?)
}

/// Say `ready`, then spin until the barrier file exists (at most a minute).
fn ready_then_wait(barrier: &Path) -> Res<()> {
    println!("ready");
    std::io::stdout().flush()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !barrier.exists() {
        if Instant::now() > deadline {
            return Err(format!("barrier {} never appeared", barrier.display()).into());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(())
}

async fn run(args: &[String]) -> Res<()> {
    let arg = |i: usize| -> Res<&str> {
        args.get(i)
            .map(String::as_str)
            .ok_or_else(|| format!("missing argument {i} in {args:?}").into())
    };
    let barrier = PathBuf::from(args.last().ok_or("no arguments")?);
    match arg(0)? {
        "create-race" => {
            let s = objects(arg(1)?)?;
            let (key, payload) = (arg(2)?, arg(3)?.to_owned());
            ready_then_wait(&barrier)?;
            match s.put_create(&object_key(key), Bytes::from(payload)).await? {
                PutOutcome::Written(_) => println!("written"),
                PutOutcome::AlreadyPresent => println!("already-present"),
                PutOutcome::Superseded => println!("superseded"),
            }
        }
        "cas-increment" => {
            let s = objects(arg(1)?)?;
            let key = arg(2)?;
            let times: u32 = arg(3)?.parse()?;
            ready_then_wait(&barrier)?;
            let mut refused = 0u64;
            for _ in 0..times {
                loop {
                    let cur = s.get_bytes(&object_key(key)).await?;
                    let n: u64 = std::str::from_utf8(&cur.bytes)?.parse()?;
                    let next = Bytes::from((n + 1).to_string());
                    match s
                        .put_update(&object_key(key), next, UpdateVersion::from(&cur.meta))
                        .await?
                    {
                        PutOutcome::Written(_) => break,
                        PutOutcome::Superseded => refused += 1,
                        PutOutcome::AlreadyPresent => {
                            return Err("update said already-present".into());
                        }
                    }
                }
            }
            println!("done {refused}");
        }
        "claim-race" => {
            let db = tables(arg(1)?)?;
            let (resource, owner) = (arg(2)?, arg(3)?);
            ready_then_wait(&barrier)?;
            let now = tilegate_core::now_millis();
            match db.acquire(resource, owner, now, now + 60_000).await? {
                AcquireOutcome::Acquired(v) => println!("acquired {}", v.row.fencing_token),
                AcquireOutcome::Existing(v) => println!("existing {}", v.row.owner),
            }
        }
        "queue-drain" => {
            let db = tables(arg(1)?)?;
            let q = db.queue(arg(2)?, 3);
            ready_then_wait(&barrier)?;
            let opts = ReceiveOptions {
                max: 3,
                wait: Duration::from_millis(300),
                visibility: Duration::from_secs(120),
            };
            let mut n = 0usize;
            loop {
                let got = q.receive(opts).await?;
                if got.is_empty() {
                    break;
                }
                for m in got {
                    println!("{}", m.message_id);
                    q.ack(&m.receipt).await?;
                    n += 1;
                }
            }
            println!("drained {n}");
        }
        "put-loop" => {
            let s = objects(arg(1)?)?;
            let prefix = arg(2)?;
            ready_then_wait(&barrier)?;
            let shared = format!("{prefix}/shared");
            for i in 0u64.. {
                let key = format!("{prefix}/obj-{i}");
                s.put_create(
                    &object_key(&key),
                    Bytes::from(tilegate_tests::crash_payload(&key, i)),
                )
                .await?;
                let next = Bytes::from(tilegate_tests::crash_payload(&shared, i));
                match s.head(&object_key(&shared)).await? {
                    None => s.put_create(&object_key(&shared), next).await?,
                    Some(m) => {
                        s.put_update(&object_key(&shared), next, UpdateVersion::from(&m))
                            .await?
                    }
                };
            }
        }
        other => return Err(format!("unknown command `{other}`").into()),
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args).await {
        let mut msg = e.to_string();
        let mut cur = e.source();
        while let Some(s) = cur {
            msg.push_str(": ");
            msg.push_str(&s.to_string());
            cur = s.source();
        }
        eprintln!("tilegate-test-child: {msg}");
        std::process::exit(2);
    }
}
