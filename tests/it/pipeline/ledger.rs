//! Regenerated outputs end to end, on the embedded backend and on AWS (the emulator the
//! README's test command starts): attempt keys, publishing by pointer, assembly through the
//! pointer, retention and GC with an injected clock, a re-link between mark and sweep,
//! reconciliation on foreign keys, tenants and their URLs.

use crate::per_backend::per_backend;
use bytes::Bytes;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tilegate_core::ledger::{AttemptState, DAY_MS, HOUR_MS, PublishOutcome, Retention, Subject};
use tilegate_core::object::{ObjectStoreExt, PutOutcome};
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, JobId, Tenant, UnixMillis, Window, WindowRect};
use tilegate_ledger::gc::{self, GcOptions};
use tilegate_ledger::{LedgerError, attempt, reconcile, url};
use tilegate_tests::object_key;
use tilegate_tests::{Target, sample, tempdir};
use tilegate_worker::regenerate;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().unwrap()
}

/// A 1024² scene of `seed` in 256-pixel windows (16), run to its tiles; extra flags are
/// passed to `run`.
fn tiles(target: &Target, data: &Path, seed: u64, extra: &[&str]) -> (PathBuf, JobId) {
    let src = data.join(format!("scene-{seed}.tif"));
    sample(data, &src, 1024, seed);
    let mut args = vec![
        "run",
        src.to_str().unwrap(),
        "--window",
        "256",
        "--no-assemble",
    ];
    args.extend_from_slice(extra);
    let run = target.json(data, &args);
    assert_eq!(run["complete"], true, "{run}");
    (src, JobId::parse(run["job_id"].as_str().unwrap()).unwrap())
}

async fn job(b: &Backends, id: &JobId) -> JobRecord {
    b.jobs.get_job(id).await.unwrap().unwrap().row
}

/// Regenerate `w` of `job` with `bytes` (instead of recomputing), published if `accept`.
async fn regen(
    b: &Backends,
    job: &JobRecord,
    w: Window,
    bytes: Bytes,
    retention: Retention,
    accept: bool,
    now: UnixMillis,
) -> regenerate::Regenerated {
    let req = regenerate::Request {
        id: None,
        retention,
        accept,
        ..Default::default()
    };
    let (row, order) = regenerate::start(b, job, w, req, now).await.unwrap();
    regenerate::finish(b, row, &order, bytes, now)
        .await
        .unwrap()
}

fn pixels(path: &Path, w: Window) -> Vec<u8> {
    let rect = WindowRect {
        x: w.col * 256,
        y: w.row * 256,
        width: 256,
        height: 256,
    };
    tilegate_cog::read_raster(path.to_str().unwrap(), Some(rect), None)
        .unwrap()
        .bytes
}

fn a_regenerated_window_is_published_by_pointer_and_assembled(target: Target) {
    let tmp = tempdir();
    let data = tmp.path();
    let (src_a, a) = tiles(&target, data, 5, &[]);
    // A second scene of the same shape: its tile is window 0_0 "re-rendered".
    let (src_b, b_job) = tiles(&target, data, 9, &[]);
    let rt = rt();
    let b = rt.block_on(target.backends(data));
    let job_a = rt.block_on(job(&b, &a));
    let job_b = rt.block_on(job(&b, &b_job));
    let w = Window::new(0, 0);
    let s = Subject::Window(w);
    let tile_key = job_a.prefix.tile_key(&a, w);
    let original = rt.block_on(b.objects.get_bytes(&tile_key)).unwrap();
    let other = rt
        .block_on(b.objects.get_bytes(&job_b.prefix.tile_key(&b_job, w)))
        .unwrap();

    // First attempt: the same pixels, at a key of its own.
    let first = rt.block_on(regen(
        &b,
        &job_a,
        w,
        original.bytes.clone(),
        Retention::default(),
        true,
        1_000,
    ));
    assert_eq!(
        first.published,
        Some(PublishOutcome::Published { previous: None })
    );
    let first_row = first.row.row.clone();
    assert_ne!(
        first_row.key, tile_key,
        "an attempt never takes a shared name"
    );
    assert!(
        first_row
            .key
            .starts_with(&format!("tilegate/attempts/{a}/0000_0000/attempt-")),
        "{}",
        first_row.key
    );
    // Second attempt: other pixels. The pointer moves from the first in one write.
    let second = rt.block_on(regen(
        &b,
        &job_a,
        w,
        other.bytes.clone(),
        Retention::default(),
        true,
        2_000,
    ));
    assert_eq!(
        second.published,
        Some(PublishOutcome::Published {
            previous: Some(first_row.attempt.clone())
        })
    );
    let p = rt.block_on(b.ledger.get_pointer(&a, s)).unwrap().unwrap();
    assert_eq!(p.row.attempt, second.row.row.attempt);
    assert_eq!(p.row.output.e_tag, other.meta.e_tag);
    // The previous attempt is retired, and readable until its deadline.
    let retired = rt
        .block_on(attempt::row(&b, &a, s, &first_row.attempt))
        .unwrap()
        .row;
    assert_eq!(retired.state, AttemptState::Retired);
    assert_eq!(retired.retired_at, Some(2_000));
    assert_eq!(retired.delete_after, Some(2_000 + DAY_MS as i64 * 7));
    assert_eq!(
        rt.block_on(b.objects.get_bytes(&object_key(&retired.key)))
            .unwrap()
            .bytes,
        original.bytes
    );
    // The deterministic tile and its row are untouched.
    let row = rt.block_on(b.manifest.get_entry(&a, w)).unwrap().unwrap();
    assert_eq!(row.row.key, tile_key);
    assert_eq!(row.row.e_tag, original.meta.e_tag);

    // A regeneration through the command line: recomputed, new key, published.
    let out = target.json(data, &["regenerate", a.as_str(), "--window", "1_1"]);
    assert_eq!(out["publish"]["outcome"], "published", "{out}");
    let key = out["key"].as_str().unwrap();
    assert!(
        rt.block_on(b.objects.head(&object_key(key)))
            .unwrap()
            .is_some()
    );
    let listed = target.json(data, &["attempts", a.as_str()]);
    assert_eq!(listed["pointers"].as_array().unwrap().len(), 2, "{listed}");
    assert_eq!(listed["by_state"]["accepted"], 2);
    assert_eq!(listed["by_state"]["retired"], 1);

    // Assembly follows the pointer: window 0_0 has the second attempt's pixels.
    let assembled = target.json(data, &["assemble", a.as_str()]);
    assert_eq!(assembled["outcome"], "written", "{assembled}");
    let scene = rt
        .block_on(b.objects.get_bytes(&job_a.prefix.scene_key(&a)))
        .unwrap();
    let path = data.join("scene-out.tif");
    std::fs::write(&path, &scene.bytes).unwrap();
    assert_eq!(pixels(&path, w), pixels(&src_b, w), "{}", target.name());
    assert_ne!(pixels(&path, w), pixels(&src_a, w));
    assert_eq!(
        pixels(&path, Window::new(0, 1)),
        pixels(&src_a, Window::new(0, 1))
    );
    tilegate_tests::validate_cog(&path).unwrap();
}

per_backend!(a_regenerated_window_is_published_by_pointer_and_assembled);

fn retention_and_gc_with_an_injected_clock(target: Target) {
    let tmp = tempdir();
    let data = tmp.path();
    let (_, a) = tiles(&target, data, 5, &[]);
    let rt = rt();
    let b = rt.block_on(target.backends(data));
    let job_a = rt.block_on(job(&b, &a));
    let bytes = |w: Window| {
        rt.block_on(b.objects.get_bytes(&job_a.prefix.tile_key(&a, w)))
            .unwrap()
            .bytes
    };
    let t0: UnixMillis = 1_700_000_000_000;
    let h = HOUR_MS as i64;

    // A 6-hour preview of window 0_1, published.
    let preview = Retention {
        preview_ms: Some(6 * HOUR_MS),
        ..Retention::default()
    };
    let w1 = Window::new(0, 1);
    let p = rt.block_on(regen(&b, &job_a, w1, bytes(w1), preview, true, t0));
    let preview_key = p.row.row.key.clone();
    // Window 0_2: an attempt replaced by a second one (the first retired at t0 + 1 h).
    let w2 = Window::new(0, 2);
    let old = rt.block_on(regen(
        &b,
        &job_a,
        w2,
        bytes(w2),
        Retention::default(),
        true,
        t0,
    ));
    let new = rt.block_on(regen(
        &b,
        &job_a,
        w2,
        bytes(Window::new(1, 2)),
        Retention::default(),
        true,
        t0 + h,
    ));
    // Window 0_3: a retired attempt on legal hold.
    let w3 = Window::new(0, 3);
    let held = rt.block_on(regen(
        &b,
        &job_a,
        w3,
        bytes(w3),
        Retention::default(),
        true,
        t0,
    ));
    // Begun a moment later, so it is the newer attempt (an order never publishes an
    // attempt begun before the one published).
    rt.block_on(regen(
        &b,
        &job_a,
        w3,
        bytes(Window::new(1, 3)),
        Retention::default(),
        true,
        t0 + 1,
    ));
    let hr = rt
        .block_on(attempt::row(
            &b,
            &a,
            Subject::Window(w3),
            &held.row.row.attempt,
        ))
        .unwrap();
    let mut on_hold = hr.row.clone();
    on_hold.legal_hold = true;
    rt.block_on(b.ledger.update_attempt(&on_hold, hr.version))
        .unwrap();

    let pass = |now: UnixMillis| rt.block_on(gc::gc(&b, &GcOptions::at(now))).unwrap();
    // A millisecond before the preview's deadline: nothing is due.
    let r = pass(t0 + 6 * h - 1);
    assert_eq!((r.marked, r.deleted), (0, 0), "{r:?}");
    assert!(present(&rt, &b, &preview_key));
    // At the deadline, one pass deletes it and withdraws its pointer.
    let r = pass(t0 + 6 * h);
    assert_eq!(r.deleted, 1, "{r:?}");
    assert_eq!(r.items[0].key, preview_key);
    assert!(!present(&rt, &b, &preview_key));
    let row = rt
        .block_on(attempt::row(
            &b,
            &a,
            Subject::Window(w1),
            &p.row.row.attempt,
        ))
        .unwrap()
        .row;
    assert_eq!(row.state, AttemptState::Deleted);
    assert_eq!(row.deletion_verified_at, Some(t0 + 6 * h));
    assert!(
        rt.block_on(b.ledger.get_pointer(&a, Subject::Window(w1)))
            .unwrap()
            .is_none()
    );
    // Retired attempts: kept 7 days from their retirement (t0 + 1 h), not from creation.
    let retired_due = t0 + h + 7 * 24 * h;
    let r = pass(retired_due - 1);
    assert_eq!(r.deleted, 0, "{r:?}");
    assert!(present(&rt, &b, &old.row.row.key));
    let r = pass(retired_due);
    assert_eq!(r.deleted, 1, "{r:?}");
    assert!(!present(&rt, &b, &old.row.row.key));
    // Long after: accepted attempts and held ones are still there.
    let r = pass(t0 + 3650 * 24 * h);
    assert_eq!(r.deleted, 0, "{r:?}");
    assert!(present(&rt, &b, &new.row.row.key));
    assert!(present(&rt, &b, &held.row.row.key));
    assert_eq!(
        rt.block_on(gc::oldest_overdue_seconds(&b, t0 + 3650 * 24 * h))
            .unwrap(),
        0,
        "nothing is overdue: held rows are not due"
    );
    // The deterministic tiles are never the ledger's to delete.
    for w in [w1, w2, w3] {
        assert!(
            rt.block_on(b.objects.head(&job_a.prefix.tile_key(&a, w)))
                .unwrap()
                .is_some()
        );
    }
}

/// Whether the store holds an object at `key`.
fn present(rt: &tokio::runtime::Runtime, b: &Backends, key: &str) -> bool {
    rt.block_on(b.objects.head(&object_key(key)))
        .unwrap()
        .is_some()
}

per_backend!(retention_and_gc_with_an_injected_clock);

fn a_relink_between_mark_and_sweep_wins(target: Target) {
    let tmp = tempdir();
    let data = tmp.path();
    let (_, a) = tiles(&target, data, 5, &[]);
    let rt = rt();
    let b = rt.block_on(target.backends(data));
    let job_a = rt.block_on(job(&b, &a));
    let w = Window::new(2, 2);
    let s = Subject::Window(w);
    let tile = rt
        .block_on(b.objects.get_bytes(&job_a.prefix.tile_key(&a, w)))
        .unwrap()
        .bytes;
    let first = rt.block_on(regen(
        &b,
        &job_a,
        w,
        tile.clone(),
        Retention::default(),
        true,
        0,
    ));
    let second = rt.block_on(regen(&b, &job_a, w, tile, Retention::default(), true, 10));
    let due = 10 + 7 * DAY_MS as i64;
    let opts = GcOptions::at(due);
    let (mut report, marked) = rt.block_on(gc::mark_pass(&b, &opts)).unwrap();
    assert_eq!(report.marked, 1);
    // The first attempt is moved back onto between the two steps.
    let relink = rt
        .block_on(attempt::accept(
            &b,
            &a,
            s,
            &first.row.row.attempt,
            Some(second.row.row.attempt.clone()),
            due + 1,
        ))
        .unwrap();
    assert_eq!(
        relink,
        PublishOutcome::Published {
            previous: Some(second.row.row.attempt.clone())
        }
    );
    rt.block_on(gc::sweep_pass(&b, marked, &opts, &mut report))
        .unwrap();
    assert_eq!(
        (report.deleted, report.skipped_changed),
        (0, 1),
        "{report:?}"
    );
    let row = rt
        .block_on(attempt::row(&b, &a, s, &first.row.row.attempt))
        .unwrap()
        .row;
    assert_eq!(row.state, AttemptState::Accepted);
    assert!(
        rt.block_on(b.objects.head(&object_key(&row.key)))
            .unwrap()
            .is_some()
    );
}

per_backend!(a_relink_between_mark_and_sweep_wins);

fn reconcile_reports_foreign_keys_byte_exactly_and_deletes_nothing(target: Target) {
    let tmp = tempdir();
    let data = tmp.path();
    let (_, a) = tiles(&target, data, 5, &[]);
    let rt = rt();
    let b = rt.block_on(target.backends(data));
    let job_a = rt.block_on(job(&b, &a));
    let w = Window::new(3, 3);
    let tile = rt
        .block_on(b.objects.get_bytes(&job_a.prefix.tile_key(&a, w)))
        .unwrap()
        .bytes;
    let gone = rt.block_on(regen(
        &b,
        &job_a,
        w,
        tile.clone(),
        Retention::default(),
        true,
        0,
    ));
    rt.block_on(regen(
        &b,
        &job_a,
        w,
        tile.clone(),
        Retention::default(),
        true,
        1,
    ));
    let clean = rt.block_on(reconcile::reconcile(&b, &job_a)).unwrap();
    assert!(clean.is_clean(), "{clean:?}");
    assert_eq!(clean.objects, 16 + 2);

    // An orphan whose name tilegate would never write (space, `%`, non-ASCII, `+`), and a
    // row whose object vanished, both injected behind tilegate's back.
    let orphan = format!(
        "{}0003_0003/attempt-ü 50%+x.tif",
        job_a.prefix.attempts_dir(&a)
    );
    match &target {
        Target::Embedded => {
            let path = data.join("objects").join(&orphan);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, b"foreign").unwrap();
            std::fs::remove_file(data.join("objects").join(&gone.row.row.key)).unwrap();
        }
        Target::Aws(aws) => {
            let s3 = rt
                .block_on(tilegate_aws::S3Store::connect(&aws.objects))
                .unwrap();
            let full = |k: &str| format!("{}/{k}", s3.prefix());
            rt.block_on(
                s3.client()
                    .put_object()
                    .bucket(s3.bucket())
                    .key(full(&orphan))
                    .body(b"foreign".to_vec().into())
                    .send(),
            )
            .unwrap();
            rt.block_on(
                s3.client()
                    .delete_object()
                    .bucket(s3.bucket())
                    .key(full(&gone.row.row.key))
                    .send(),
            )
            .unwrap();
        }
        Target::Objects(_) => unreachable!(),
    }
    let r = rt.block_on(reconcile::reconcile(&b, &job_a)).unwrap();
    assert_eq!(r.orphans.len(), 1, "{r:?}");
    assert_eq!(r.orphans[0].key.as_bytes(), orphan.as_bytes());
    assert_eq!(r.orphans[0].size, 7);
    assert_eq!(r.missing.len(), 1, "{r:?}");
    assert_eq!(r.missing[0].key, gone.row.row.key);
    assert_eq!(r.missing[0].state, Some("retired"));
    // The command: exit code 5, the same keys in --json, byte for byte; nothing deleted.
    let out = target
        .command(data)
        .args(["--json", "reconcile", a.as_str()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["orphans"][0]["key"].as_str().unwrap(), orphan);
    let after = rt.block_on(reconcile::reconcile(&b, &job_a)).unwrap();
    assert_eq!(after.orphans, r.orphans, "reconcile deletes nothing");
    assert_eq!(after.objects, r.objects);
}

per_backend!(reconcile_reports_foreign_keys_byte_exactly_and_deletes_nothing);

/// Regenerate window 0_0 of `job` as an accepted preview kept an hour: the window, its
/// subject, the tile's bytes and when.
fn accepted_preview(
    rt: &tokio::runtime::Runtime,
    b: &Backends,
    job: &JobRecord,
) -> (Window, Subject, Bytes, UnixMillis) {
    let w = Window::new(0, 0);
    let tile = rt
        .block_on(b.objects.get_bytes(&job.prefix.tile_key(&job.job_id, w)))
        .unwrap()
        .bytes;
    let now = tilegate_core::now_millis();
    let preview = Retention {
        preview_ms: Some(HOUR_MS),
        ..Retention::default()
    };
    rt.block_on(regen(b, job, w, tile.clone(), preview, true, now));
    (w, Subject::Window(w), tile, now)
}

fn tenants_are_apart_and_urls_are_theirs(target: Target) {
    let tmp = tempdir();
    let data = tmp.path();
    let (_, a) = tiles(&target, data, 5, &["--tenant", "acme"]);
    // The same source for another tenant is another job, with objects of its own.
    let src = data.join("scene-5.tif");
    let run = target.json(
        data,
        &[
            "run",
            src.to_str().unwrap(),
            "--window",
            "256",
            "--no-assemble",
            "--tenant",
            "globex",
        ],
    );
    let g = JobId::parse(run["job_id"].as_str().unwrap()).unwrap();
    assert_ne!(a, g);
    let rt = rt();
    let b = rt.block_on(target.backends(data));
    let job_a = rt.block_on(job(&b, &a));
    assert_eq!(job_a.tenant.as_str(), "acme");
    assert_eq!(job_a.prefix.as_str(), "tilegate/tenants/acme");
    let (_, s, _, now) = accepted_preview(&rt, &b, &job_a);
    let acme = Tenant::parse("acme").unwrap();
    let globex = Tenant::parse("globex").unwrap();
    let fifteen = Duration::from_secs(900);
    // Another tenant gets a named refusal and no URL.
    let err = rt
        .block_on(url::grant(&b, &job_a, s, &globex, fifteen, now))
        .unwrap_err();
    assert!(matches!(err, LedgerError::NotYourTenant { .. }), "{err}");
    let out = target
        .command(data)
        .args(["url", a.as_str(), "--window", "0_0", "--tenant", "globex"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "no URL on a refusal");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("error[not-your-tenant]"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    match &target {
        Target::Embedded => {
            // The local store has no signer: after authorisation, the file's `file://` URL,
            // said to be a path no expiry ends.
            let g = rt
                .block_on(url::grant(&b, &job_a, s, &acme, fifteen, now))
                .unwrap();
            assert!(!g.expiring, "{g:?}");
            let path = g.url.strip_prefix("file://").expect("a file URL");
            let want = rt
                .block_on(b.objects.get_bytes(&object_key(&g.key)))
                .unwrap()
                .bytes;
            assert_eq!(std::fs::read(path).unwrap(), want.to_vec());
        }
        _ => {
            // 15 minutes asked, well inside the hour of retention.
            let g15 = rt
                .block_on(url::grant(&b, &job_a, s, &acme, fifteen, now))
                .unwrap();
            assert_eq!(g15.expires_at, now + 900_000);
            assert!(!g15.capped_by_retention);
            assert!(g15.url.contains("X-Amz-Expires=900"), "{}", g15.url);
            // A day asked: capped at the preview's deadline.
            let day = Duration::from_secs(86_400);
            let gd = rt
                .block_on(url::grant(&b, &job_a, s, &acme, day, now))
                .unwrap();
            assert!(gd.capped_by_retention);
            assert_eq!(gd.expires_at, now + HOUR_MS as i64);
            assert!(gd.url.contains("X-Amz-Expires=3600"), "{}", gd.url);
            // And the URL reads the accepted attempt's bytes.
            let got = http_get(&gd.url);
            let want = rt
                .block_on(b.objects.get_bytes(&object_key(&gd.key)))
                .unwrap()
                .bytes;
            assert_eq!(got, want.to_vec());
        }
    }
    // Past the row's retention: no URL at all.
    let err = rt
        .block_on(url::grant(
            &b,
            &job_a,
            s,
            &acme,
            fifteen,
            now + HOUR_MS as i64,
        ))
        .unwrap_err();
    assert_eq!(err.reason_code(), "retention-expired", "{err}");
    // A create at an attempt key that holds another attempt's object is refused.
    let p = rt.block_on(b.ledger.get_pointer(&a, s)).unwrap().unwrap();
    assert_eq!(
        rt.block_on(
            b.objects
                .put_create(&object_key(&p.row.output.key), Bytes::from_static(b"x"))
        )
        .unwrap(),
        PutOutcome::AlreadyPresent
    );
}

per_backend!(tenants_are_apart_and_urls_are_theirs);

/// The status of a GET of `url`.
fn http_status(url: &str) -> u16 {
    tilegate_tests::http::get(url).status
}

/// A GET of an `http://host:port/path?query` URL (the emulator's) that must answer 200: its body.
fn http_get(url: &str) -> Vec<u8> {
    let r = tilegate_tests::http::get(url);
    assert_eq!(r.status, 200, "GET {url}: {}", r.text());
    r.body
}

fn a_scene_is_regenerated_as_an_attempt_from_the_accepted_tiles(target: Target) {
    let tmp = tempdir();
    let data = tmp.path();
    let src_a = data.join("scene-5.tif");
    sample(data, &src_a, 1024, 5);
    let run = target.json(data, &["run", src_a.to_str().unwrap(), "--window", "256"]);
    let a = JobId::parse(run["job_id"].as_str().unwrap()).unwrap();
    let (src_b, b_job) = tiles(&target, data, 9, &[]);
    let rt = rt();
    let b = rt.block_on(target.backends(data));
    let job_a = rt.block_on(job(&b, &a));
    let scene = job_a.scene_output.clone().expect("the deterministic scene");
    let w = Window::new(0, 0);
    let other = rt
        .block_on(
            b.objects
                .get_bytes(&rt.block_on(job(&b, &b_job)).prefix.tile_key(&b_job, w)),
        )
        .unwrap();
    rt.block_on(regen(
        &b,
        &job_a,
        w,
        other.bytes,
        Retention::default(),
        true,
        1,
    ));

    let out = target.json(data, &["regenerate", a.as_str(), "--scene"]);
    assert_eq!(out["publish"]["outcome"], "published", "{out}");
    let key = out["key"].as_str().unwrap().to_owned();
    assert!(
        key.starts_with(&format!("tilegate/attempts/{a}/scene/attempt-")),
        "{key}"
    );
    let p = rt
        .block_on(b.ledger.get_pointer(&a, Subject::Scene))
        .unwrap()
        .unwrap();
    assert_eq!(p.row.output.key, key);
    // The new scene has the accepted window; the deterministic one is as it was.
    let got = rt.block_on(b.objects.get_bytes(&object_key(&key))).unwrap();
    assert_eq!(got.meta.e_tag, p.row.output.e_tag);
    let path = data.join("regenerated.tif");
    std::fs::write(&path, &got.bytes).unwrap();
    tilegate_tests::validate_cog(&path).unwrap();
    assert_eq!(pixels(&path, w), pixels(&src_b, w));
    assert_eq!(
        pixels(&path, Window::new(2, 3)),
        pixels(&src_a, Window::new(2, 3))
    );
    let det = rt
        .block_on(b.objects.head(&object_key(&scene.key)))
        .unwrap()
        .unwrap();
    assert_eq!(
        det.e_tag, scene.e_tag,
        "the deterministic scene is never rewritten"
    );
    assert_eq!(rt.block_on(job(&b, &a)).scene_output, Some(scene));
}

per_backend!(a_scene_is_regenerated_as_an_attempt_from_the_accepted_tiles);

#[test]
fn a_regeneration_travels_in_a_message_and_a_redelivery_continues_it() {
    let target = Target::Embedded;
    let tmp = tempdir();
    let data = tmp.path();
    let (_, a) = tiles(&target, data, 5, &[]);
    let out = target.json(
        data,
        &["regenerate", a.as_str(), "--window", "1_1", "--enqueue"],
    );
    let id = tilegate_core::ledger::AttemptId::parse(out["attempt"].as_str().unwrap()).unwrap();
    assert_eq!(
        out["state"], "uploading",
        "the row is written before any upload: {out}"
    );
    let rt = rt();
    let b = rt.block_on(target.backends(data));
    let job_a = rt.block_on(job(&b, &a));
    let w = Window::new(1, 1);
    // The same order delivered twice more (a transport retry), and one naming no attempt row.
    let again = tilegate_core::message::WindowMessage {
        attempt: Some(tilegate_core::ledger::AttemptOrder {
            id: id.clone(),
            accept: true,
        }),
        ..tilegate_core::message::WindowMessage::for_job(&job_a, w)
    };
    let stray = tilegate_core::message::WindowMessage {
        attempt: Some(tilegate_core::ledger::AttemptOrder {
            id: attempt::new_id(),
            accept: true,
        }),
        ..tilegate_core::message::WindowMessage::for_job(&job_a, w)
    };
    rt.block_on(
        b.queue
            .send_batch(&[again.encode(), again.encode(), stray.encode()]),
    )
    .unwrap();
    let work = target
        .command(data)
        .args(["work", "--until-empty", "--threads", "1"])
        .output()
        .unwrap();
    assert!(
        work.status.code() == Some(0) || work.status.code() == Some(3),
        "{}",
        String::from_utf8_lossy(&work.stderr)
    );
    let rows = rt.block_on(b.ledger.list_attempts(&a)).unwrap();
    assert_eq!(
        rows.len(),
        1,
        "one attempt, however often it was delivered: {rows:?}"
    );
    assert_eq!(rows[0].row.attempt, id);
    assert_eq!(rows[0].row.state, AttemptState::Accepted);
    let p = rt
        .block_on(b.ledger.get_pointer(&a, Subject::Window(w)))
        .unwrap()
        .unwrap();
    assert_eq!(p.row.attempt, id);
    let objects = rt
        .block_on(b.objects.list(&job_a.prefix.attempts_dir(&a)))
        .unwrap();
    assert_eq!(objects.len(), 1, "{objects:?}");
    let dead = rt.block_on(b.queue.list_dead_letters(10)).unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(
        dead[0].reason.starts_with("unknown-attempt"),
        "{}",
        dead[0].reason
    );
}

/// The reproduction through the CLI: attempt A1 is published by its order, A2 by its own, and
/// A1's order comes back (`regenerate --enqueue --attempt A1`, as a redelivery would): the
/// worker acknowledges it as `accept-refused`, the pointer stays on A2, A2 keeps no deadline
/// and A1 stays retired. On the embedded backend and on AWS.
fn a_returning_order_through_the_queue_leaves_the_pointer_on_the_newer_attempt(target: Target) {
    let tmp = tempdir();
    let data = tmp.path();
    let (_, a) = tiles(&target, data, 7, &[]);
    let rt = rt();
    let b = rt.block_on(target.backends(data));
    let s = Subject::Window(Window::new(2, 2));
    let enqueue = |extra: &[&str]| {
        let mut args = vec!["regenerate", a.as_str(), "--window", "2_2", "--enqueue"];
        args.extend_from_slice(extra);
        let out = target.json(data, &args);
        let work = target.json(data, &["work", "--until-empty", "--threads", "1"]);
        (out["attempt"].as_str().unwrap().to_owned(), work)
    };
    let (a1, _) = enqueue(&[]);
    let (a2, _) = enqueue(&[]);
    let p = rt.block_on(b.ledger.get_pointer(&a, s)).unwrap().unwrap();
    assert_eq!(p.row.attempt.as_str(), a2);
    let (again, work) = enqueue(&["--attempt", &a1]);
    assert_eq!(again, a1);
    assert_eq!(work["accepts_refused"], 1, "{work}");
    assert_eq!(work["dead_lettered"], 0, "{work}");
    assert_eq!(
        work["counters"][tilegate_core::metrics::ACCEPTS_REFUSED],
        1,
        "{work}"
    );
    let p = rt.block_on(b.ledger.get_pointer(&a, s)).unwrap().unwrap();
    assert_eq!(
        p.row.attempt.as_str(),
        a2,
        "a returning order moved the pointer back on {}",
        target.name()
    );
    let rows = rt.block_on(b.ledger.list_attempts(&a)).unwrap();
    let state = |id: &str| {
        rows.iter()
            .find(|r| r.row.attempt.as_str() == id)
            .map(|r| (r.row.state, r.row.delete_after.is_some()))
            .unwrap()
    };
    assert_eq!(state(&a2), (AttemptState::Accepted, false));
    assert_eq!(state(&a1), (AttemptState::Retired, true));
    // The operator may still move it back, explicitly.
    let acc = target.json(
        data,
        &["accept", a.as_str(), "--window", "2_2", "--attempt", &a1],
    );
    assert_eq!(acc["publish"]["outcome"], "published", "{acc}");
}

per_backend!(a_returning_order_through_the_queue_leaves_the_pointer_on_the_newer_attempt);

/// The other reproduction through the CLI: an order waits in the queue longer than the upload
/// grace (a backlog; here GC runs with its clock 7 hours on), and is then worked. The row is
/// not collected while it waits, and the regeneration is published — not dead-lettered as
/// `attempt-not-uploading`. On the embedded backend and on AWS.
fn an_enqueued_order_that_waited_past_the_grace_is_still_published(target: Target) {
    let tmp = tempdir();
    let data = tmp.path();
    let (_, a) = tiles(&target, data, 8, &[]);
    let out = target.json(
        data,
        &["regenerate", a.as_str(), "--window", "3_0", "--enqueue"],
    );
    let id = out["attempt"].as_str().unwrap().to_owned();
    let later = (tilegate_core::now_millis() + 7 * HOUR_MS as i64).to_string();
    let gc = target.json(data, &["gc", "--test-now-ms", &later]);
    assert_eq!(gc["deleted"], 0, "a waiting order was collected: {gc}");
    let work = target.json(data, &["work", "--until-empty", "--threads", "1"]);
    assert_eq!(work["dead_lettered"], 0, "{work}");
    let rt = rt();
    let b = rt.block_on(target.backends(data));
    let p = rt
        .block_on(b.ledger.get_pointer(&a, Subject::Window(Window::new(3, 0))))
        .unwrap()
        .expect("published");
    assert_eq!(p.row.attempt.as_str(), id, "on {}", target.name());
    assert!(
        rt.block_on(b.objects.head(&object_key(&p.row.output.key)))
            .unwrap()
            .is_some()
    );
}

per_backend!(an_enqueued_order_that_waited_past_the_grace_is_still_published);

/// Embedded only: moto answers every upload's `Initiated` with a fixed placeholder, so an S3
/// upload started by another process has no age there (`S3Store::initiated_of`; the S3
/// cleanup path is covered in-process by the conformance suite's `list_multipart_older_than`).
#[test]
fn stale_uploads_are_reported_against_the_ledger() {
    {
        let target = Target::Embedded;
        let tmp = tempdir();
        let data = tmp.path();
        let (_, a) = tiles(&target, data, 5, &[]);
        let rt = rt();
        let b = rt.block_on(target.backends(data));
        let job_a = rt.block_on(job(&b, &a));
        // A scene attempt whose assembler died mid-upload: its row and an open upload.
        let row = rt
            .block_on(attempt::begin(
                &b,
                &job_a,
                Subject::Scene,
                attempt::new_id(),
                Retention::default(),
                false,
                1,
            ))
            .unwrap();
        rt.block_on(b.objects.create_multipart(
            &object_key(&row.row.key),
            &tilegate_core::object::PutOptions::create(),
        ))
        .unwrap();
        // Older than a second by the store's clock (S3 reports initiation in whole seconds).
        std::thread::sleep(Duration::from_millis(2500));
        let out = target.json(data, &["cleanup-uploads", "--older-than-s", "1"]);
        let ours: Vec<_> = out["uploads"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|u| u["key"] == row.row.key.as_str())
            .collect();
        assert_eq!(ours.len(), 1, "{out}");
        assert_eq!(ours[0]["ledger"]["state"], "uploading");
        assert_eq!(ours[0]["ledger"]["attempt"], row.row.attempt.as_str());
        assert!(
            rt.block_on(b.objects.list_multipart("", None))
                .unwrap()
                .iter()
                .all(|u| u.key != row.row.key),
            "aborted"
        );
        // status reports the ledger: counts by state and the deletion gauge.
        let st = target.json(data, &["status", a.as_str()]);
        assert_eq!(st["ledger"]["attempts"], 1, "{st}");
        assert_eq!(st["ledger"]["by_state"]["uploading"], 1);
        assert!(
            st["ledger"]["deletion_overdue_oldest_seconds"]
                .as_u64()
                .unwrap()
                > 0
        );
    }
}

/// The same authorisation and cap on the other clouds: Azure signs a service SAS for the one
/// blob (Azurite checks the signature, so a wrong string-to-sign is a 403 here); GCS signs V4
/// URLs with a service account's key, which an anonymous emulator client has not: a named
/// refusal after the tenant check.
#[test]
fn tenant_urls_on_azure_and_gcs() {
    let account = tilegate_tests::azure_emulator();
    let _ = tilegate_tests::gcs_emulator();
    let az = format!(
        "az://{}/{}/out",
        account.name,
        tilegate_tests::azure_container()
    );
    let gs = format!("gs://{}/out", tilegate_tests::unique("tg-url"));
    for url_base in [az, gs] {
        let target = Target::Objects(url_base.clone());
        let tmp = tempdir();
        let data = tmp.path();
        target.json(data, &["init", "--create-bucket"]);
        let (_, a) = tiles(&target, data, 5, &[]);
        let rt = rt();
        let b = rt.block_on(target.backends(data));
        let job_a = rt.block_on(job(&b, &a));
        let (w, s, tile, now) = accepted_preview(&rt, &b, &job_a);
        let other = Tenant::parse("other").unwrap();
        let me = Tenant::default();
        let err = rt
            .block_on(url::grant(
                &b,
                &job_a,
                s,
                &other,
                Duration::from_secs(900),
                now,
            ))
            .unwrap_err();
        assert!(matches!(err, LedgerError::NotYourTenant { .. }), "{err}");
        let asked = Duration::from_secs(86_400);
        match target.name() {
            "azure" => {
                let g = rt
                    .block_on(url::grant(&b, &job_a, s, &me, asked, now))
                    .unwrap();
                assert!(g.capped_by_retention);
                assert!(g.url.contains("sr=b&sp=r&"), "{}", g.url);
                assert_eq!(http_get(&g.url), tile.to_vec());
                // The signature covers this blob only: the same SAS on the window's tile (which
                // exists) is refused.
                let elsewhere = g.url.replace(&g.key, &job_a.prefix.tile_key(&a, w));
                assert_ne!(elsewhere, g.url);
                assert_eq!(http_status(&elsewhere), 403, "{elsewhere}");
            }
            _ => {
                let err = rt
                    .block_on(url::grant(&b, &job_a, s, &me, asked, now))
                    .unwrap_err();
                assert_eq!(
                    err.reason_code(),
                    tilegate_core::Reason::StorageRefused,
                    "{err}"
                );
                assert!(
                    format!("{:?}", err).contains("sign"),
                    "named refusal: {err:?}"
                );
            }
        }
    }
}

/// A worker process SIGKILLed between a regeneration's object and its row: the row says
/// `uploading` and explains the object; once the upload grace has passed, GC deletes the
/// object (it carries the row's attempt token) and marks the row deleted, and the redelivered
/// message is refused by name instead of reviving the attempt.
#[test]
fn a_worker_killed_mid_upload_leaves_a_row_gc_collects() {
    let target = Target::Embedded;
    let tmp = tempdir();
    let data = tmp.path();
    let (_, a) = tiles(&target, data, 5, &[]);
    let out = target.json(
        data,
        &["regenerate", a.as_str(), "--window", "2_1", "--enqueue"],
    );
    let key = out["key"].as_str().unwrap().to_owned();
    let killed = tilegate_tests::work_until_fault(data, "attempt-after-put", 0);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&killed.status),
        Some(libc::SIGKILL),
        "{}",
        String::from_utf8_lossy(&killed.stderr)
    );
    let rt = rt();
    let b = rt.block_on(target.backends(data));
    let s = Subject::Window(Window::new(2, 1));
    let id = tilegate_core::ledger::AttemptId::parse(out["attempt"].as_str().unwrap()).unwrap();
    let row = rt.block_on(attempt::row(&b, &a, s, &id)).unwrap().row;
    assert_eq!(row.state, AttemptState::Uploading);
    assert_eq!(row.e_tag, None);
    let object = rt
        .block_on(b.objects.head(&object_key(&key)))
        .unwrap()
        .expect("the object");
    assert_eq!(
        object.metadata.get(tilegate_core::object::ATTEMPT_METADATA),
        Some(&id.to_string())
    );
    // The grace counts from when the worker began the upload. Before it has passed nothing
    // is collected; after it, both go.
    let started = row.upload_started_at.expect("the worker began the upload");
    let soon = (started + 60_000).to_string();
    let r = target.json(data, &["gc", "--test-now-ms", &soon]);
    assert_eq!(r["deleted"], 0, "{r}");
    let later = (started + 6 * HOUR_MS as i64).to_string();
    let r = target.json(data, &["gc", "--test-now-ms", &later]);
    assert_eq!(r["deleted"], 1, "{r}");
    assert_eq!(r["items"][0]["key"], key.as_str());
    assert!(
        rt.block_on(b.objects.head(&object_key(&key)))
            .unwrap()
            .is_none()
    );
    let row = rt.block_on(attempt::row(&b, &a, s, &id)).unwrap().row;
    assert_eq!(row.state, AttemptState::Deleted);
    // The message comes back after its visibility; the collected attempt is not revived.
    std::thread::sleep(Duration::from_millis(1200));
    let _ = target
        .command(data)
        .args(["work", "--until-empty", "--threads", "1"])
        .output()
        .unwrap();
    let dead = rt.block_on(b.queue.list_dead_letters(10)).unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(
        dead[0].reason.starts_with("attempt-collected"),
        "{}",
        dead[0].reason
    );
    assert!(
        rt.block_on(b.objects.head(&object_key(&key)))
            .unwrap()
            .is_none()
    );
    assert!(rt.block_on(b.ledger.get_pointer(&a, s)).unwrap().is_none());
}

/// A data directory copied the way people copy directories (`cp -r`, which keeps no extended
/// attributes, so the local store's sidecars and the attempt token in them are gone): GC still
/// collects an upload that died before it recorded itself — the attempt's key names the
/// attempt, so the object there is its own without the token.
#[test]
fn gc_collects_a_dead_upload_in_a_data_directory_copied_without_attributes() {
    let target = Target::Embedded;
    let tmp = tempdir();
    let data = tmp.path().join("original");
    std::fs::create_dir_all(&data).unwrap();
    let (_, a) = tiles(&target, &data, 6, &[]);
    let out = target.json(
        &data,
        &["regenerate", a.as_str(), "--window", "1_2", "--enqueue"],
    );
    let key = out["key"].as_str().unwrap().to_owned();
    let killed = tilegate_tests::work_until_fault(&data, "attempt-after-put", 0);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&killed.status),
        Some(libc::SIGKILL)
    );
    let copy = tmp.path().join("copy");
    let cp = std::process::Command::new("cp")
        .arg("-r")
        .arg(&data)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(cp.success());
    let rt = rt();
    let b = rt.block_on(target.backends(&copy));
    let object = rt
        .block_on(b.objects.head(&object_key(&key)))
        .unwrap()
        .expect("copied");
    assert!(
        !object
            .metadata
            .contains_key(tilegate_core::object::ATTEMPT_METADATA),
        "the copy kept the attempt token: {object:?}"
    );
    let id = tilegate_core::ledger::AttemptId::parse(out["attempt"].as_str().unwrap()).unwrap();
    let row = rt
        .block_on(attempt::row(
            &b,
            &a,
            Subject::Window(Window::new(1, 2)),
            &id,
        ))
        .unwrap()
        .row;
    let due = (row.delete_after.expect("a started upload has a deadline") + 1).to_string();
    let r = target.json(&copy, &["gc", "--test-now-ms", &due]);
    assert_eq!(
        (r["deleted"].as_u64(), r["skipped_mismatch"].as_u64()),
        (Some(1), Some(0)),
        "{r}"
    );
    assert!(
        rt.block_on(b.objects.head(&object_key(&key)))
            .unwrap()
            .is_none()
    );
}

// ---------------------------------------------------------------------------------------------
// Chaos for the ledger.

/// Every put and delete the object store receives, in order: the store's request log.
#[derive(Debug, Clone, Default)]
struct Requests(Arc<Mutex<Vec<(&'static str, String)>>>);

impl tilegate_tests::StoreScript for Requests {
    fn before_write(&self, operation: &'static str, key: &str) -> tilegate_core::StoreResult<()> {
        self.0.lock().unwrap().push((operation, key.to_owned()));
        Ok(())
    }
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// GC passes running beside regenerations, orders no worker took, uploads that die after their
/// start or after their object, an upload slower than its grace (holds racing its late record),
/// orders that waited longer than the grace, returning (redelivered) orders, re-links onto
/// retired and marked attempts (some landing between a mark and its sweep), and legal holds —
/// on a virtual clock the GC task moves 30 minutes per pass. Judged by the store's request log,
/// the final rows and the publishes seen: no referenced or held object deleted, every due
/// object deleted, no delete issued for a key that is not a ledger row's exact key, no order's
/// publish moved a pointer onto an attempt older than one already published, and some
/// returning order was refused.
fn ledger_chaos(target: Target) {
    let tmp = tempdir();
    let data = tmp.path();
    let (_, a) = tiles(&target, data, 5, &[]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let base = rt.block_on(target.backends(data));
    let log = Requests::default();
    let b = Backends {
        objects: Arc::new(tilegate_tests::ScriptedStore {
            inner: base.objects.clone(),
            script: log.clone(),
        }),
        ..base.clone()
    };
    let job_a = rt.block_on(job(&b, &a));
    let windows: Vec<Window> = job_a.grid.windows().collect();
    let tile_bytes: Vec<Bytes> = windows
        .iter()
        .map(|w| {
            rt.block_on(b.objects.get_bytes(&job_a.prefix.tile_key(&a, *w)))
                .unwrap()
                .bytes
        })
        .collect();
    let seed = tilegate_core::now_millis().unsigned_abs() | 1;
    println!("ledger_chaos seed {seed} on {}", target.name());
    let chaos = LedgerChaos {
        b,
        job_a,
        windows,
        tile_bytes,
        clock: Arc::new(AtomicI64::new(1_700_000_000_000)),
        collected: Arc::new(AtomicU64::new(0)),
        old_orders: Arc::new(AtomicU64::new(0)),
        history: History::default(),
    };
    rt.block_on(chaos.clone().run(seed));

    // Judge.
    let judged = judge_ledger_chaos(&rt, &chaos, &log);
    let (b, history) = (&chaos.b, &chaos.history);
    let mut bad = judged.bad;
    bad.extend(history.violations());
    let rec = rt.block_on(reconcile::reconcile(b, &chaos.job_a)).unwrap();
    if !rec.orphans.is_empty() || !rec.missing.is_empty() || !rec.mismatched.is_empty() {
        bad.push(format!("reconcile: {rec:?}"));
    }
    println!(
        "ledger_chaos on {}: {} rows, {} pointers, {} held, {} deletes issued, {} slow uploads collected, {} orders older than the grace, {} order publishes checked ({} refused)",
        target.name(),
        judged.rows,
        judged.pointers,
        judged.held,
        judged.deletes,
        chaos.collected.load(Ordering::SeqCst),
        chaos.old_orders.load(Ordering::SeqCst),
        history.checked(),
        history.refused(),
    );
    assert!(bad.is_empty(), "seed {seed}: {}", bad.join("\n"));
    assert!(
        judged.deletes > 10,
        "GC must have deleted something: {}",
        judged.deletes
    );
    assert!(
        history.refused() > 0,
        "no returning order was refused: the chaos missed it"
    );
}

/// What `ledger_chaos`'s tasks share: the stores (objects through the request log), the job
/// and its tiles, the virtual clock, and what the tasks count and publish.
#[derive(Clone)]
struct LedgerChaos {
    b: Backends,
    job_a: JobRecord,
    windows: Vec<Window>,
    tile_bytes: Vec<Bytes>,
    clock: Arc<AtomicI64>,
    collected: Arc<AtomicU64>,
    old_orders: Arc<AtomicU64>,
    history: History,
}

/// An order that `ledger_chaos` started, with what its task does next.
struct Started {
    i: usize,
    w: Window,
    row: tilegate_core::table::Versioned<tilegate_core::ledger::AttemptRow>,
    order: tilegate_core::ledger::AttemptOrder,
}

impl LedgerChaos {
    fn now(&self) -> UnixMillis {
        self.clock.load(Ordering::SeqCst)
    }

    /// Three regenerating tasks, the re-linker and GC at once; then, far past every deadline,
    /// two passes that collect everything due.
    async fn run(self, seed: u64) {
        let done = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for r in 0..3u64 {
            let rng = Rng(seed ^ (r + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            tasks.push(tokio::spawn(self.clone().regenerations(rng)));
        }
        let rng = Rng(seed.rotate_left(17) | 1);
        let relinker = tokio::spawn(self.clone().relinks(rng, done.clone()));
        let gc_task = tokio::spawn(self.clone().gc_passes(done.clone()));
        for t in tasks {
            t.await.unwrap();
        }
        done.store(true, Ordering::SeqCst);
        relinker.await.unwrap();
        let passes = gc_task.await.unwrap();
        // Far past every deadline: two passes collect everything due.
        self.clock.fetch_add(100 * DAY_MS as i64, Ordering::SeqCst);
        for _ in 0..2 {
            gc::gc(&self.b, &GcOptions::at(self.now())).await.unwrap();
        }
        println!("ledger_chaos: {passes} gc passes");
    }

    /// One task's 30 regenerations, each ending one way by chance — or an order it finished
    /// coming back.
    async fn regenerations(self, mut rng: Rng) {
        let retention = |preview: bool| Retention {
            preview_ms: preview.then_some(HOUR_MS),
            retired_ms: 3 * HOUR_MS,
            upload_grace_ms: 2 * HOUR_MS,
        };
        // Orders this task finished, for redeliveries.
        let mut done_orders: Vec<(Window, tilegate_core::ledger::AttemptOrder)> = Vec::new();
        let mut returned_at_once = false;
        for _ in 0..30 {
            let i = rng.below(self.windows.len() as u64) as usize;
            let w = self.windows[i];
            let action = rng.below(12);
            // A returning order: one this task finished comes back (an SQS duplicate, a lost
            // acknowledgement, a visibility timeout).
            if action == 11 && !done_orders.is_empty() {
                let k = rng.below(done_orders.len() as u64) as usize;
                let (w, order) = done_orders[k].clone();
                returning_order(&self.b, &self.job_a, &self.history, w, &order, self.now()).await;
                continue;
            }
            let req = regenerate::Request {
                id: None,
                retention: retention(action == 9),
                accept: action != 8,
                ..Default::default()
            };
            let (row, order) = regenerate::start(&self.b, &self.job_a, w, req, self.now())
                .await
                .unwrap();
            let started = Started { i, w, row, order };
            match action {
                // An order no worker ever took: no deadline, no object.
                0 => {}
                1 | 10 => self.killed_upload(started, action == 1).await,
                2 => self.slow_upload(started).await,
                3 => done_orders.push(self.old_order(started).await),
                _ => {
                    done_orders.push(self.finish(started, &mut returned_at_once).await);
                }
            }
            tokio::time::sleep(Duration::from_millis(rng.below(8))).await;
        }
    }

    /// A worker killed after starting the upload, or (`with_object`) after its object before
    /// recording it.
    async fn killed_upload(&self, o: Started, with_object: bool) {
        let row = attempt::start_upload(&self.b, o.row, self.now())
            .await
            .unwrap();
        if with_object {
            let opts = tilegate_core::object::PutOptions {
                metadata: [(
                    tilegate_core::object::ATTEMPT_METADATA.to_owned(),
                    o.order.id.to_string(),
                )]
                .into(),
                ..tilegate_core::object::PutOptions::create()
            };
            self.b
                .objects
                .put_opts(
                    &object_key(&row.row.key),
                    self.tile_bytes[o.i].clone(),
                    opts,
                )
                .await
                .unwrap();
        }
    }

    /// Wait on the virtual clock until three hours have passed.
    async fn three_hours(&self) {
        let until = self.now() + 3 * HOUR_MS as i64;
        while self.now() < until {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// An upload slower than its grace: begun, then the object and its record land after GC
    /// may have collected the row (a hold may have landed in between).
    async fn slow_upload(&self, o: Started) {
        let row = attempt::start_upload(&self.b, o.row, self.now())
            .await
            .unwrap();
        self.three_hours().await;
        let put = attempt::put(&self.b, &row.row, self.tile_bytes[o.i].clone()).await;
        let meta = match put {
            Ok(m) => m,
            Err(e) => panic!("slow upload's put: {e}"),
        };
        match attempt::record(&self.b, row, meta.size, meta.e_tag, self.now()).await {
            Ok(_) => {}
            Err(LedgerError::CollectedWhileUploading { .. }) => {
                self.collected.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => panic!("slow upload: {e}"),
        }
    }

    /// An order that waited in the queue longer than the upload grace: never collected for
    /// having waited.
    async fn old_order(&self, o: Started) -> (Window, tilegate_core::ledger::AttemptOrder) {
        self.three_hours().await;
        let s = Subject::Window(o.w);
        let row = attempt::row(&self.b, &self.job_a.job_id, s, &o.order.id)
            .await
            .unwrap();
        let before = self.history.snapshot(s);
        let done = regenerate::finish(
            &self.b,
            row,
            &o.order,
            self.tile_bytes[o.i].clone(),
            self.now(),
        )
        .await
        .unwrap_or_else(|e| panic!("an order older than the grace: {e}"));
        self.history.order_outcome(s, &done, before);
        self.old_orders.fetch_add(1, Ordering::SeqCst);
        (o.w, o.order)
    }

    /// An order finished at once. The first published order of each task comes back at once as
    /// well, so that every run sees a refused return whatever the seed and the machine's pace
    /// (GC may collect later returns' rows first).
    async fn finish(
        &self,
        o: Started,
        returned_at_once: &mut bool,
    ) -> (Window, tilegate_core::ledger::AttemptOrder) {
        let s = Subject::Window(o.w);
        let before = self.history.snapshot(s);
        let done = regenerate::finish(
            &self.b,
            o.row,
            &o.order,
            self.tile_bytes[o.i].clone(),
            self.now(),
        )
        .await
        .unwrap();
        self.history.order_outcome(s, &done, before);
        if o.order.accept && !*returned_at_once {
            *returned_at_once = true;
            returning_order(
                &self.b,
                &self.job_a,
                &self.history,
                o.w,
                &o.order,
                self.now(),
            )
            .await;
        }
        (o.w, o.order)
    }

    /// Re-links onto retired or marked attempts, and legal holds, until `done`.
    async fn relinks(self, mut rng: Rng, done: Arc<AtomicBool>) {
        let a = &self.job_a.job_id;
        while !done.load(Ordering::SeqCst) {
            let rows = self.b.ledger.list_attempts(a).await.unwrap();
            // Holds also go on marked rows whose upload has not recorded yet: they race a
            // slow upload's late record.
            let candidates: Vec<_> = rows
                .iter()
                .filter(|r| {
                    (r.row.publishable() && r.row.state != AttemptState::Uploaded)
                        || (r.row.state == AttemptState::Deleting
                            && r.row.sweep_started_at.is_none())
                })
                .collect();
            if !candidates.is_empty() {
                let r = &candidates[rng.below(candidates.len() as u64) as usize].row;
                if rng.below(4) == 0 || !r.publishable() {
                    let _ = attempt::set_hold(&self.b, a, r.subject, &r.attempt, true).await;
                } else {
                    let out =
                        attempt::accept_current(&self.b, a, r.subject, &r.attempt, self.now())
                            .await
                            .unwrap();
                    if matches!(out, PublishOutcome::Published { .. }) {
                        self.history.published(r.subject, r);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    }

    /// GC until `done`: whole passes and split ones (a pause between mark and sweep), the
    /// clock 30 minutes on after each. Returns how many passes ran.
    async fn gc_passes(self, done: Arc<AtomicBool>) -> u64 {
        let mut passes = 0u64;
        while !done.load(Ordering::SeqCst) {
            let opts = GcOptions::at(self.now());
            if passes.is_multiple_of(2) {
                gc::gc(&self.b, &opts).await.unwrap();
            } else {
                let (mut r, marked) = gc::mark_pass(&self.b, &opts).await.unwrap();
                tokio::time::sleep(Duration::from_millis(10)).await;
                gc::sweep_pass(&self.b, marked, &opts, &mut r)
                    .await
                    .unwrap();
            }
            self.clock.fetch_add(HOUR_MS as i64 / 2, Ordering::SeqCst);
            passes += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        passes
    }
}

/// What `ledger_chaos` found in the final rows, pointers and request log.
struct LedgerJudged {
    bad: Vec<String>,
    rows: usize,
    pointers: usize,
    held: usize,
    deletes: usize,
}

/// No delete of a key that is not a deleted row's exact key; every pointer on an accepted row
/// whose object is in place; every held object kept, no untaken order given a deadline or an
/// object, everything else due deleted and verified; no deterministic tile deleted.
fn judge_ledger_chaos(
    rt: &tokio::runtime::Runtime,
    chaos: &LedgerChaos,
    log: &Requests,
) -> LedgerJudged {
    let (b, a) = (&chaos.b, &chaos.job_a.job_id);
    let rows = rt.block_on(b.ledger.list_attempts(a)).unwrap();
    let pointers = rt.block_on(b.ledger.list_pointers(a)).unwrap();
    let row_of: std::collections::HashMap<&str, &tilegate_core::ledger::AttemptRow> =
        rows.iter().map(|r| (r.row.key.as_str(), &r.row)).collect();
    let requests = log.0.lock().unwrap().clone();
    let deletes: Vec<&String> = requests
        .iter()
        .filter(|(op, _)| *op == "delete")
        .map(|(_, k)| k)
        .collect();
    let mut bad = Vec::new();
    for k in &deletes {
        match row_of.get(k.as_str()) {
            None => bad.push(format!("delete of `{k}`, which is no ledger row's key")),
            Some(r) if r.state != AttemptState::Deleted => {
                bad.push(format!(
                    "delete of `{k}`, whose row is {} (hold {})",
                    r.state, r.legal_hold
                ));
            }
            Some(_) => {}
        }
    }
    for p in &pointers {
        let r = row_of[p.row.output.key.as_str()];
        if r.state != AttemptState::Accepted {
            bad.push(format!("pointer {} names a {} row", p.row.subject, r.state));
        }
        match rt
            .block_on(b.objects.head(&object_key(&p.row.output.key)))
            .unwrap()
        {
            Some(m) if m.e_tag == p.row.output.e_tag => {}
            other => bad.push(format!("published `{}` is {other:?}", p.row.output.key)),
        }
    }
    let accepted = rows
        .iter()
        .filter(|r| r.row.state == AttemptState::Accepted)
        .count();
    if accepted != pointers.len() {
        bad.push(format!(
            "{accepted} accepted rows, {} pointers",
            pointers.len()
        ));
    }
    let mut held = 0;
    for r in &rows {
        let r = &r.row;
        let present = rt
            .block_on(b.objects.head(&object_key(&r.key)))
            .unwrap()
            .is_some();
        if r.legal_hold {
            held += 1;
            if r.e_tag.is_some() && !present {
                bad.push(format!("held `{}` ({}) is gone", r.key, r.state));
            }
        } else if r.state == AttemptState::Uploading && r.upload_started_at.is_none() {
            // An order no worker took: no deadline, and nothing at its key.
            if r.delete_after.is_some() || present {
                bad.push(format!(
                    "untaken order `{}`: {:?}, object {present}",
                    r.key, r.delete_after
                ));
            }
        } else if r.state != AttemptState::Accepted {
            // Everything else was due long ago: deleted, verified, object gone.
            if r.state != AttemptState::Deleted || r.deletion_verified_at.is_none() {
                bad.push(format!("due `{}` was left {}", r.key, r.state));
            }
            if present {
                bad.push(format!("due `{}` still has its object", r.key));
            }
        }
    }
    // The deterministic tiles: never deleted.
    for w in &chaos.windows {
        let k = chaos.job_a.prefix.tile_key(a, *w);
        if deletes.iter().any(|d| **d == k) {
            bad.push(format!("deleted the tile `{k}`"));
        }
    }
    LedgerJudged {
        bad,
        rows: rows.len(),
        pointers: pointers.len(),
        held,
        deletes: deletes.len(),
    }
}

per_backend!(ledger_chaos);

/// An order a task finished comes back (an SQS duplicate, a lost acknowledgement, a visibility
/// timeout) and is finished again; the history judges what its publish did.
async fn returning_order(
    b: &Backends,
    job: &JobRecord,
    history: &History,
    w: Window,
    order: &tilegate_core::ledger::AttemptOrder,
    now: UnixMillis,
) {
    let s = Subject::Window(w);
    let row = attempt::row(b, &job.job_id, s, &order.id).await.unwrap();
    if row.row.state == AttemptState::Deleted {
        return;
    }
    let before = history.snapshot(s);
    match regenerate::finish(b, row, order, Bytes::new(), now).await {
        Ok(done) => history.order_outcome(s, &done, before),
        Err(regenerate::RegenerateError::Ledger(LedgerError::CollectedWhileUploading {
            ..
        })) => {}
        Err(e) => panic!("returning order: {e}"),
    }
}

/// What the chaos saw published, to judge orders by: an order's publish that moved the
/// pointer must have moved it onto an attempt begun after every attempt whose publish had
/// returned before that order's publish began (subjects that had a preview published are left
/// out: a preview's expiry withdraws the pointer, and the subject starts afresh).
#[derive(Clone, Default)]
struct History(Arc<Mutex<HistoryState>>);

#[derive(Default)]
struct HistoryState {
    newest: std::collections::HashMap<Subject, (UnixMillis, String)>,
    previewed: std::collections::HashSet<Subject>,
    violations: Vec<String>,
    checked: u64,
    refused: u64,
}

impl History {
    fn snapshot(&self, s: Subject) -> Option<(UnixMillis, String)> {
        self.0.lock().unwrap().newest.get(&s).cloned()
    }

    fn published(&self, s: Subject, r: &tilegate_core::ledger::AttemptRow) {
        let mut h = self.0.lock().unwrap();
        if r.retention.preview_ms.is_some() {
            h.previewed.insert(s);
        }
        let this = (r.created_at, r.attempt.to_string());
        let e = h.newest.entry(s).or_insert_with(|| this.clone());
        if this > *e {
            *e = this;
        }
    }

    fn order_outcome(
        &self,
        s: Subject,
        done: &regenerate::Regenerated,
        before: Option<(UnixMillis, String)>,
    ) {
        let r = &done.row.row;
        if done.accept_refused().is_some() {
            self.0.lock().unwrap().refused += 1;
        }
        if !matches!(done.published, Some(PublishOutcome::Published { .. })) {
            return;
        }
        {
            let mut h = self.0.lock().unwrap();
            h.checked += 1;
            let this = (r.created_at, r.attempt.to_string());
            if !h.previewed.contains(&s)
                && let Some(b) = before
                && this <= b
            {
                h.violations.push(format!(
                    "an order moved {s}'s pointer back onto {} (begun {}), below {} (begun {})",
                    r.attempt, r.created_at, b.1, b.0
                ));
            }
        }
        self.published(s, r);
    }

    fn violations(&self) -> Vec<String> {
        self.0.lock().unwrap().violations.clone()
    }

    fn checked(&self) -> u64 {
        self.0.lock().unwrap().checked
    }

    fn refused(&self) -> u64 {
        self.0.lock().unwrap().refused
    }
}
