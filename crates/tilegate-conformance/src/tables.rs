//! Table conformance: conditional creates and version-guarded updates of jobs and manifest
//! rows, the claim lease (fencing tokens, expiry, done), atomic counters, and their races.

use super::{Harness, skip, unique};
use std::sync::Arc;
use tilegate_core::grid::{Grid, Window};
use tilegate_core::id::JobId;
use tilegate_core::keys::Prefix;
use tilegate_core::recipe::Recipe;
use tilegate_core::source::{SceneMeta, SourceInfo};
use tilegate_core::table::{
    AcquireOutcome, ClaimChange, ClaimState, CreateOutcome, JobRecord, ManifestEntry, OutputRef,
    TileOrigin, UpdateOutcome, Versioned, manifest_partitions, manifest_shard,
};
use tilegate_core::{ETag, now_millis};

fn job(source: &str, created_at: i64) -> JobRecord {
    let recipe = Recipe::copy_all();
    let etag = ETag::new("\"source-etag\"");
    JobRecord {
        job_id: JobId::derive(
            source,
            etag.as_str(),
            &recipe.fingerprint(),
            "prefix=tilegate",
        ),
        source: SourceInfo {
            uri: source.to_owned(),
            etag,
            size: 4096,
            stat: None,
            assets: Vec::new(),
            signed: false,
        },
        recipe,
        grid: Grid::new(1024, 1536, 512).unwrap(),
        prefix: Prefix::default(),
        tenant: tilegate_core::Tenant::default(),
        scene: SceneMeta {
            width: 1024,
            height: 1536,
            bands: 3,
            dtype: "Byte".to_owned(),
            crs_wkt: String::new(),
            geotransform: [0.0, 10.0, 0.0, 0.0, 0.0, -10.0],
            nodata: None,
            placement: None,
            datetime: None,
        },
        created_at,
        scene_output: None,
        manifest_shards: 1,
        redrives: 0,
        outbox: Vec::new(),
        windows_enqueued: false,
        settled: false,
    }
}

/// A fresh job record (its source made unique from `tag`), for tests beside the suite.
pub fn new_job(tag: &str) -> JobRecord {
    job(&format!("file:///{}.tif", unique(tag)), now_millis())
}

/// A manifest row of `job` for window `w`, for tests beside the suite.
pub fn entry(job: &JobId, w: Window, size: u64) -> ManifestEntry {
    ManifestEntry {
        job_id: job.clone(),
        window: w,
        key: String::from(Prefix::default().tile_key(job, w)),
        size,
        e_tag: ETag::new(format!("\"etag-{w}\"")),
        origin: TileOrigin::Written,
        recorded_at: now_millis(),
        facts: Default::default(),
    }
}

fn output(key: &str) -> OutputRef {
    OutputRef {
        key: key.to_owned(),
        e_tag: ETag::new("\"scene\""),
        size: 99,
    }
}

pub async fn job_create_twice(h: &dyn Harness) {
    let t = h.jobs();
    let first = new_job("job-twice");
    assert_eq!(t.create_job(&first).await.unwrap(), CreateOutcome::Created);
    // A duplicate planner's row differs (later time); the stored row stays the first.
    let mut dup = first.clone();
    dup.created_at += 1000;
    match t.create_job(&dup).await.unwrap() {
        CreateOutcome::AlreadyExists(existing) => {
            assert_eq!(existing.version, 1);
            assert_eq!(existing.row, first);
        }
        CreateOutcome::Created => panic!("second create succeeded"),
    }
    let got = t.get_job(&first.job_id).await.unwrap().unwrap();
    assert_eq!(
        got,
        Versioned {
            version: 1,
            row: first
        }
    );
    let absent = new_job("job-absent");
    assert_eq!(t.get_job(&absent.job_id).await.unwrap(), None);
}

pub async fn job_update_versions(h: &dyn Harness) {
    let t = h.jobs();
    let mut j = new_job("job-update");
    t.create_job(&j).await.unwrap();
    j.scene_output = Some(output("tilegate/scenes/x.tif"));
    assert_eq!(
        t.update_job(&j, 1).await.unwrap(),
        UpdateOutcome::Updated { version: 2 }
    );
    let stale = {
        let mut s = j.clone();
        s.scene_output = None;
        s
    };
    match t.update_job(&stale, 1).await.unwrap() {
        UpdateOutcome::Superseded(Some(cur)) => {
            assert_eq!(cur.version, 2);
            assert_eq!(cur.row, j);
        }
        other => panic!("expected Superseded with the current row, got {other:?}"),
    }
    let got = t.get_job(&j.job_id).await.unwrap().unwrap();
    assert_eq!(got.version, 2);
    assert_eq!(got.row.scene_output, j.scene_output);

    let ghost = new_job("job-ghost");
    assert_eq!(
        t.update_job(&ghost, 1).await.unwrap(),
        UpdateOutcome::Superseded(None)
    );
    assert_eq!(t.get_job(&ghost.job_id).await.unwrap(), None);
}

pub async fn job_list_newest_first(h: &dyn Harness) {
    let t = h.jobs();
    let base = now_millis();
    let tag = unique("job-list");
    let jobs: Vec<JobRecord> = (0..3)
        .map(|i| job(&format!("file:///{tag}-{i}.tif"), base + i))
        .collect();
    for j in [&jobs[1], &jobs[0], &jobs[2]] {
        t.create_job(j).await.unwrap();
    }
    let ours: Vec<JobId> = t
        .list_jobs(10_000)
        .await
        .unwrap()
        .into_iter()
        .map(|v| v.row.job_id)
        .filter(|id| jobs.iter().any(|j| &j.job_id == id))
        .collect();
    let expected: Vec<JobId> = jobs.iter().rev().map(|j| j.job_id.clone()).collect();
    assert_eq!(ours, expected);
    assert!(t.list_jobs(1).await.unwrap().len() <= 1);
}

/// A tenant's listing holds its own jobs only, newest first, ties by job ID, at most `limit`;
/// another tenant's jobs — newer ones included — are in no page of it, and an update (a job
/// published) keeps the row in its tenant's listing.
pub async fn job_list_of_a_tenant(h: &dyn Harness) {
    let t = h.jobs();
    let base = now_millis();
    let tag = unique("job-tenant");
    let ours = tilegate_core::Tenant::parse(&unique("ours")).unwrap();
    let theirs = tilegate_core::Tenant::parse(&unique("theirs")).unwrap();
    let mut mine = Vec::new();
    for i in 0..4 {
        let mut j = job(&format!("file:///{tag}-ours-{i}.tif"), base + i / 2);
        j.tenant = ours.clone();
        t.create_job(&j).await.unwrap();
        mine.push(j);
        // Newer jobs of another tenant around each of ours.
        let mut other = job(&format!("file:///{tag}-theirs-{i}.tif"), base + 10 + i);
        other.tenant = theirs.clone();
        t.create_job(&other).await.unwrap();
    }
    let mut published = mine[0].clone();
    published.scene_output = Some(output("tilegate/scenes/x.tif"));
    t.update_job(&published, 1).await.unwrap();
    mine[0] = published;
    let mut expected: Vec<&JobRecord> = mine.iter().collect();
    expected.sort_by(|a, b| {
        b.created_at
            .cmp(&a.created_at)
            .then_with(|| a.job_id.as_str().cmp(b.job_id.as_str()))
    });
    let listed = t.list_jobs_of(&ours, 100).await.unwrap();
    let rows: Vec<&JobRecord> = listed.iter().map(|v| &v.row).collect();
    assert_eq!(rows, expected);
    let updated = listed.iter().find(|v| v.row.job_id == mine[0].job_id);
    assert_eq!(updated.map(|v| v.version), Some(2));
    let first_two = t.list_jobs_of(&ours, 2).await.unwrap();
    let ids: Vec<&JobId> = first_two.iter().map(|v| &v.row.job_id).collect();
    assert_eq!(ids, vec![&expected[0].job_id, &expected[1].job_id]);
    let theirs_listed = t.list_jobs_of(&theirs, 100).await.unwrap();
    assert_eq!(theirs_listed.len(), 4);
    assert!(theirs_listed.iter().all(|v| v.row.tenant == theirs));
    let nobody = tilegate_core::Tenant::parse(&unique("nobody")).unwrap();
    assert!(t.list_jobs_of(&nobody, 100).await.unwrap().is_empty());
}

/// The open jobs: oldest first, ties by job ID, at most `limit`; a job leaves the listing with
/// the write that settles it and comes back with the one that reopens it (a redrive); a job
/// created settled is never in it. (The jobs are dated at the epoch's start so that other
/// tests' open jobs, on a shared table, come after them.)
pub async fn job_list_of_open_jobs(h: &dyn Harness) {
    let t = h.jobs();
    let tag = unique("job-open");
    let mut ours = Vec::new();
    for i in 0..3 {
        let j = job(&format!("file:///{tag}-{i}.tif"), 1 + i);
        t.create_job(&j).await.unwrap();
        ours.push(j);
    }
    let mut done = job(&format!("file:///{tag}-settled.tif"), 1);
    done.settled = true;
    t.create_job(&done).await.unwrap();
    let listed = |rows: Vec<Versioned<JobRecord>>| -> Vec<JobId> {
        rows.into_iter()
            .map(|v| v.row.job_id)
            .filter(|id| ours.iter().chain([&done]).any(|j| &j.job_id == id))
            .collect()
    };
    let ids = |js: &[&JobRecord]| -> Vec<JobId> { js.iter().map(|j| j.job_id.clone()).collect() };
    assert_eq!(
        listed(t.list_open_jobs(1000).await.unwrap()),
        ids(&[&ours[0], &ours[1], &ours[2]])
    );
    assert!(t.list_open_jobs(2).await.unwrap().len() <= 2);
    let mut settled = ours[1].clone();
    settled.settled = true;
    assert!(matches!(
        t.update_job(&settled, 1).await.unwrap(),
        UpdateOutcome::Updated { version: 2 }
    ));
    assert_eq!(
        listed(t.list_open_jobs(1000).await.unwrap()),
        ids(&[&ours[0], &ours[2]])
    );
    settled.settled = false;
    t.update_job(&settled, 2).await.unwrap();
    let back = t.list_open_jobs(1000).await.unwrap();
    assert_eq!(listed(back.clone()), ids(&[&ours[0], &ours[1], &ours[2]]));
    let reopened = back.iter().find(|v| v.row.job_id == ours[1].job_id);
    assert_eq!(reopened.map(|v| v.version), Some(3));
}

/// 8 tasks × 10 version-guarded updates of one job row: every update lands exactly once.
pub async fn job_cas_race(h: &dyn Harness) {
    const TASKS: i64 = 8;
    const EACH: i64 = 10;
    let t = h.jobs();
    let j = new_job("job-cas");
    let start = j.created_at;
    t.create_job(&j).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (t, id) = (Arc::clone(&t), j.job_id.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..EACH {
                loop {
                    let cur = t.get_job(&id).await.unwrap().unwrap();
                    let mut next = cur.row.clone();
                    next.created_at += 1;
                    match t.update_job(&next, cur.version).await.unwrap() {
                        UpdateOutcome::Updated { version } => {
                            assert_eq!(version, cur.version + 1);
                            break;
                        }
                        UpdateOutcome::Superseded(_) => {}
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let got = t.get_job(&j.job_id).await.unwrap().unwrap();
    assert_eq!(got.row.created_at, start + TASKS * EACH);
    assert_eq!(got.version, 1 + u64::try_from(TASKS * EACH).unwrap());
}

pub async fn manifest_put_count_list(h: &dyn Harness) {
    let m = h.manifest();
    let id = new_job("manifest").job_id;
    let windows = [Window::new(1, 0), Window::new(0, 1), Window::new(0, 0)];
    for (i, w) in windows.iter().enumerate() {
        assert_eq!(
            m.put_entry(&entry(&id, *w, 100 + i as u64)).await.unwrap(),
            CreateOutcome::Created
        );
    }
    // A duplicate worker records the same window again (after AlreadyPresent).
    let mut dup = entry(&id, Window::new(0, 1), 555);
    dup.origin = TileOrigin::AlreadyPresent;
    match m.put_entry(&dup).await.unwrap() {
        CreateOutcome::AlreadyExists(existing) => {
            assert_eq!(existing.version, 1);
            assert_eq!(existing.row.size, 101);
            assert_eq!(existing.row.origin, TileOrigin::Written);
        }
        CreateOutcome::Created => panic!("duplicate manifest row created"),
    }
    assert_eq!(m.count_entries(&id).await.unwrap(), 3);
    let listed: Vec<Window> = m
        .list_entries(&id)
        .await
        .unwrap()
        .into_iter()
        .map(|v| v.row.window)
        .collect();
    assert_eq!(
        listed,
        vec![Window::new(0, 0), Window::new(0, 1), Window::new(1, 0)]
    );
    let got = m.get_entry(&id, Window::new(1, 0)).await.unwrap().unwrap();
    assert_eq!(got.row.size, 100);
    assert_eq!(m.get_entry(&id, Window::new(9, 9)).await.unwrap(), None);
    let other = new_job("manifest-other").job_id;
    assert_eq!(m.count_entries(&other).await.unwrap(), 0);
    assert!(m.list_entries(&other).await.unwrap().is_empty());
}

/// A job planned with a sharded manifest: each row lands in the partition its window hashes to
/// (`JOB#NN`), reads find it there, and counts and listings cover every partition.
pub async fn manifest_sharded(h: &dyn Harness) {
    const SHARDS: u32 = 4;
    let mut row = new_job("manifest-sharded");
    row.manifest_shards = SHARDS;
    let id = row.job_id.clone();
    assert_eq!(
        h.jobs().create_job(&row).await.unwrap(),
        CreateOutcome::Created
    );
    let m = h.manifest();
    let windows: Vec<Window> = (0..40u32).map(|i| Window::new(i / 8, i % 8)).collect();
    for w in &windows {
        assert_eq!(
            m.put_entry(&entry(&id, *w, 7)).await.unwrap(),
            CreateOutcome::Created
        );
    }
    // A duplicate is refused in its own shard.
    assert!(matches!(
        m.put_entry(&entry(&id, windows[5], 8)).await.unwrap(),
        CreateOutcome::AlreadyExists(_)
    ));
    let mut expected = vec![0u64; SHARDS as usize];
    for w in &windows {
        expected[manifest_shard(*w, SHARDS) as usize] += 1;
    }
    let counts = m.count_partitions(&id).await.unwrap();
    let names: Vec<String> = counts.iter().map(|(pk, _)| pk.clone()).collect();
    assert_eq!(names, manifest_partitions(&id, SHARDS));
    let got: Vec<u64> = counts.iter().map(|(_, n)| *n).collect();
    assert_eq!(got, expected, "rows per partition");
    // Each partition's row counter moved with its rows, once per row (the duplicate above
    // counted nothing), read one partition at a time or all at once.
    assert_eq!(m.recorded_all(&id).await.unwrap(), expected, "row counters");
    for (shard, n) in expected.iter().enumerate() {
        assert_eq!(
            m.recorded(&id, shard as u32).await.unwrap(),
            *n,
            "shard {shard}"
        );
    }
    assert_eq!(m.recorded(&id, SHARDS).await.unwrap(), 0, "no such shard");
    assert!(
        got.iter().all(|n| *n > 0),
        "40 windows over 4 shards leave none empty: {got:?}"
    );
    assert_eq!(m.count_entries(&id).await.unwrap(), 40);
    let listed: Vec<Window> = m
        .list_entries(&id)
        .await
        .unwrap()
        .into_iter()
        .map(|v| v.row.window)
        .collect();
    assert_eq!(listed, windows, "listed across shards, in window order");
    let got = m.get_entry(&id, windows[5]).await.unwrap().unwrap();
    assert_eq!((got.version, got.row.size), (1, 7));
    assert_eq!(
        m.update_entry(&entry(&id, windows[5], 9), 1).await.unwrap(),
        UpdateOutcome::Updated { version: 2 }
    );
    assert_eq!(
        m.get_entry(&id, windows[5])
            .await
            .unwrap()
            .unwrap()
            .row
            .size,
        9
    );
    // An unsharded job has one partition named by its ID.
    let plain = new_job("manifest-unsharded");
    h.jobs().create_job(&plain).await.unwrap();
    m.put_entry(&entry(&plain.job_id, Window::new(0, 0), 1))
        .await
        .unwrap();
    assert_eq!(
        m.count_partitions(&plain.job_id).await.unwrap(),
        vec![(plain.job_id.to_string(), 1)]
    );
    assert_eq!(m.recorded(&plain.job_id, 0).await.unwrap(), 1);
    assert_eq!(m.recorded_all(&plain.job_id).await.unwrap(), vec![1]);
    // A job with no rows yet has counters of nothing.
    let empty = new_job("manifest-empty");
    h.jobs().create_job(&empty).await.unwrap();
    assert_eq!(m.recorded(&empty.job_id, 0).await.unwrap(), 0);
    assert_eq!(m.recorded_all(&empty.job_id).await.unwrap(), vec![0]);
}

pub async fn manifest_update_versions(h: &dyn Harness) {
    let m = h.manifest();
    let id = new_job("manifest-update").job_id;
    let w = Window::new(2, 3);
    m.put_entry(&entry(&id, w, 10)).await.unwrap();
    let mut repaired = entry(&id, w, 20);
    repaired.origin = TileOrigin::Repaired;
    assert_eq!(
        m.update_entry(&repaired, 1).await.unwrap(),
        UpdateOutcome::Updated { version: 2 }
    );
    match m.update_entry(&entry(&id, w, 30), 1).await.unwrap() {
        UpdateOutcome::Superseded(Some(cur)) => {
            assert_eq!(cur.version, 2);
            assert_eq!(cur.row.size, 20);
        }
        other => panic!("expected Superseded, got {other:?}"),
    }
    let got = m.get_entry(&id, w).await.unwrap().unwrap();
    assert_eq!((got.version, got.row.size), (2, 20));
    assert_eq!(m.count_entries(&id).await.unwrap(), 1);
    assert_eq!(
        m.recorded(&id, 0).await.unwrap(),
        1,
        "an update counts nothing"
    );
}

/// 16 concurrent puts of distinct windows all land; 16 concurrent puts of one window create
/// exactly one row.
pub async fn manifest_concurrent_puts(h: &dyn Harness) {
    let m = h.manifest();
    let id = new_job("manifest-race").job_id;
    let mut tasks = Vec::new();
    for i in 0..16u32 {
        let (m, id) = (Arc::clone(&m), id.clone());
        tasks.push(tokio::spawn(async move {
            m.put_entry(&entry(&id, Window::new(i / 4, i % 4), 1))
                .await
                .unwrap()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), CreateOutcome::Created);
    }
    assert_eq!(m.count_entries(&id).await.unwrap(), 16);
    assert_eq!(
        m.recorded(&id, 0).await.unwrap(),
        16,
        "16 racing creates on one partition's counter, each counted once"
    );

    let same = new_job("manifest-race-same").job_id;
    let mut tasks = Vec::new();
    for i in 0..16u64 {
        let (m, id) = (Arc::clone(&m), same.clone());
        tasks.push(tokio::spawn(async move {
            m.put_entry(&entry(&id, Window::new(0, 0), i))
                .await
                .unwrap()
        }));
    }
    let mut created = 0;
    for t in tasks {
        if t.await.unwrap() == CreateOutcome::Created {
            created += 1;
        }
    }
    assert_eq!(created, 1);
    assert_eq!(m.count_entries(&same).await.unwrap(), 1);
    assert_eq!(
        m.recorded(&same, 0).await.unwrap(),
        1,
        "one row, counted once"
    );
}

pub async fn claim_lifecycle(h: &dyn Harness) {
    let c = h.claims();
    let r = unique("claim");
    let t0 = now_millis();
    let ttl = 60_000;

    let a = match c.acquire(&r, "owner-a", t0, t0 + ttl).await.unwrap() {
        AcquireOutcome::Acquired(v) => v,
        other => panic!("expected Acquired, got {other:?}"),
    };
    assert_eq!(a.row.fencing_token, 1);
    assert_eq!(a.row.owner, "owner-a");
    assert_eq!(a.row.state, ClaimState::Held);

    match c
        .acquire(&r, "owner-b", t0 + 1, t0 + 1 + ttl)
        .await
        .unwrap()
    {
        AcquireOutcome::Existing(v) => {
            assert_eq!(v.row.owner, "owner-a");
            assert_eq!(v.row.fencing_token, 1);
        }
        other => panic!("expected Existing, got {other:?}"),
    }

    // A's lease lapses; B takes over with the next fencing token.
    let later = t0 + ttl + 1;
    let b = match c.acquire(&r, "owner-b", later, later + ttl).await.unwrap() {
        AcquireOutcome::Acquired(v) => v,
        other => panic!("expected a takeover, got {other:?}"),
    };
    assert_eq!(b.row.fencing_token, 2);
    assert_eq!(b.row.owner, "owner-b");

    // A, fenced off, can neither renew nor complete.
    let renew = ClaimChange::Renew {
        expires_at: later + 2 * ttl,
    };
    for change in [
        renew.clone(),
        ClaimChange::Complete {
            output: output("a-output"),
        },
        ClaimChange::Release,
    ] {
        match c.change(&r, "owner-a", 1, change).await.unwrap() {
            UpdateOutcome::Superseded(Some(cur)) => assert_eq!(cur.row.owner, "owner-b"),
            other => panic!("old owner changed the claim: {other:?}"),
        }
    }
    // Right owner, wrong token: refused too.
    assert!(matches!(
        c.change(&r, "owner-b", 1, renew.clone()).await.unwrap(),
        UpdateOutcome::Superseded(_)
    ));

    let v = match c.change(&r, "owner-b", 2, renew).await.unwrap() {
        UpdateOutcome::Updated { version } => version,
        other => panic!("renew refused: {other:?}"),
    };
    let got = c.get_claim(&r).await.unwrap().unwrap();
    assert_eq!(got.version, v);
    assert_eq!(got.row.expires_at, later + 2 * ttl);

    let done = ClaimChange::Complete {
        output: output("scene.tif"),
    };
    assert!(matches!(
        c.change(&r, "owner-b", 2, done.clone()).await.unwrap(),
        UpdateOutcome::Updated { .. }
    ));
    let got = c.get_claim(&r).await.unwrap().unwrap();
    assert_eq!(got.row.state, ClaimState::Done);
    assert_eq!(got.row.output, Some(output("scene.tif")));
    // Done is final: no second completion or renewal, even by the holder.
    assert!(matches!(
        c.change(&r, "owner-b", 2, done).await.unwrap(),
        UpdateOutcome::Superseded(_)
    ));

    // Long after expiry, a done claim is still not acquirable.
    let much_later = later + 100 * ttl;
    match c
        .acquire(&r, "owner-c", much_later, much_later + ttl)
        .await
        .unwrap()
    {
        AcquireOutcome::Existing(v) => {
            assert_eq!(v.row.state, ClaimState::Done);
            assert_eq!(v.row.owner, "owner-b");
        }
        other => panic!("acquired a done claim: {other:?}"),
    }
    assert_eq!(c.get_claim(&unique("claim-none")).await.unwrap(), None);
}

pub async fn claim_release(h: &dyn Harness) {
    let c = h.claims();
    let r = unique("claim-release");
    let t0 = now_millis();
    assert!(matches!(
        c.acquire(&r, "a", t0, t0 + 60_000).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    assert!(matches!(
        c.change(&r, "a", 1, ClaimChange::Release).await.unwrap(),
        UpdateOutcome::Updated { .. }
    ));
    // Released: another owner may take it at once, without waiting for the lease to lapse.
    match c.acquire(&r, "b", t0 + 1, t0 + 60_000).await.unwrap() {
        AcquireOutcome::Acquired(v) => assert_eq!(v.row.fencing_token, 2),
        other => panic!("expected Acquired after release, got {other:?}"),
    }
}

/// 16 tasks acquire one claim at once: exactly one holds it.
pub async fn claim_concurrent_acquire(h: &dyn Harness) {
    let c = h.claims();
    let r = unique("claim-race");
    let now = now_millis();
    let barrier = Arc::new(tokio::sync::Barrier::new(16));
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (c, r, barrier) = (Arc::clone(&c), r.clone(), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            c.acquire(&r, &format!("owner-{i}"), now, now + 60_000)
                .await
                .unwrap()
        }));
    }
    let mut acquired = Vec::new();
    for t in tasks {
        if let AcquireOutcome::Acquired(v) = t.await.unwrap() {
            acquired.push(v);
        }
    }
    assert_eq!(acquired.len(), 1, "{acquired:?}");
    let got = c.get_claim(&r).await.unwrap().unwrap();
    assert_eq!(got.row.owner, acquired[0].row.owner);
    assert_eq!(got.row.fencing_token, 1);
}

/// 8 tasks × 25 adds to two counters: the sums are exact.
pub async fn counters_concurrent_add(h: &dyn Harness) {
    let c = h.counters();
    let id = new_job("counters").job_id;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (c, id) = (Arc::clone(&c), id.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                c.add_counters(&id, &[("tiles_written_total", 1), ("bytes", 10)])
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let got = c.get_counters(&id).await.unwrap();
    assert_eq!(got.get("tiles_written_total"), Some(&200));
    assert_eq!(got.get("bytes"), Some(&2000));
    // A store that bills requests counts its own counter writes too (one per add).
    let own: Vec<_> = got
        .iter()
        .filter(|(k, _)| k.starts_with(tilegate_core::metrics::REQUESTS))
        .collect();
    assert!(own.iter().all(|(_, v)| **v == 200), "{own:?}");
    assert_eq!(got.len(), 2 + own.len(), "{got:?}");
    let other = new_job("counters-none").job_id;
    assert!(c.get_counters(&other).await.unwrap().is_empty());
}

/// 4 processes acquire one claim at once: exactly one `acquired`.
pub async fn claim_race_cross_process(h: &dyn Harness) {
    let Some(urls) = h.child_urls().filter(|_| h.caps().cross_process) else {
        skip(
            "tables::claim_race_cross_process",
            "no cross-process helper for this backend",
        );
        return;
    };
    let r = unique("xproc-claim");
    let dir = crate::tempdir();
    let args: Vec<Vec<String>> = (0..4)
        .map(|i| vec!["claim-race".into(), r.clone(), format!("process-{i}")])
        .collect();
    let outcomes = crate::child::run_children(&urls, args, &dir.path().join("go")).await;
    let last: Vec<String> = outcomes
        .iter()
        .map(|o| o.last().cloned().unwrap_or_default())
        .collect();
    let winners: Vec<usize> = last
        .iter()
        .enumerate()
        .filter(|(_, o)| o.starts_with("acquired"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(winners.len(), 1, "{last:?}");
    assert_eq!(last[winners[0]], "acquired 1");
    let holder = format!("process-{}", winners[0]);
    for (i, o) in last.iter().enumerate() {
        if i != winners[0] {
            assert_eq!(o, &format!("existing {holder}"));
        }
    }
    let got = h.claims().get_claim(&r).await.unwrap().unwrap();
    assert_eq!(got.row.owner, holder);
}
