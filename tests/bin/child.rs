//! A child process for the crash-safety test (`tests/it/faults/crash.rs`): a writer the test
//! kills mid-write. (The conformance suite's cross-process races run their own test binary as
//! the child; see `tilegate_conformance::child`.)
//!
//! It opens its store, prints `ready`, waits until the start-barrier file (its last argument)
//! exists, then acts:
//!
//! - `put-loop <objects-url> <prefix> <barrier>` → never returns: Creates `<prefix>/obj-<i>`
//!   for i = 0, 1, … and replaces `<prefix>/shared` by compare-and-swap after each, every
//!   payload self-checking ([`tilegate_tests::crash_payload`]); the test kills it mid-write.
//!
//! URLs: `file://<dir>` (local object store).

use bytes::Bytes;
use std::error::Error;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tilegate_core::object::{ObjectStore as _, ObjectStoreExt as _, UpdateVersion};
use tilegate_embedded::LocalObjectStore;
use tilegate_tests::object_key;

type Res<T> = Result<T, Box<dyn Error>>;

fn objects(url: &str) -> Res<LocalObjectStore> {
    let dir = url
        .strip_prefix("file://")
        .ok_or_else(|| format!("unsupported object store URL `{url}` (want file://)"))?;
    Ok(LocalObjectStore::open(dir)?)
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
