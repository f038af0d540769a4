//! What a person looks at, checked as they would see it: the job report rendered by headless
//! Chromium (one cell per window, colours and legend counts equal to the manifest's, a dead
//! letter and a missing window shown as such, the same counts as `status --json`), the scene's
//! STAC Item validated by `stac-validator` on both backends and left alone by a second run,
//! and `status --cost` equal to the requests that reached the AWS emulator.

use crate::per_backend::per_backend;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use tilegate_core::object::ObjectStoreExt as _;
use tilegate_core::queue::ReceiveOptions;
use tilegate_core::table::TileOrigin;
use tilegate_core::{JobId, Window};
use tilegate_report::WindowState;
use tilegate_report::html::colour;
use tilegate_tests::lossy::LossyProxy;
use tilegate_tests::object_key;
use tilegate_tests::{
    Aws, Target, artifacts_dir, chromium, elements, render_in_chromium, sample, tempdir, tg,
    tg_json, validate_stac, work_one_at_a_time,
};

/// Windows by state as the manifest (and dead-letter queue) of the data directory say,
/// read through the stores, not through `tilegate`.
async fn states_from_rows(data: &Path, job: &JobId) -> BTreeMap<Window, &'static str> {
    let b = tilegate_embedded::open_data_dir(data, 3).expect("open data dir");
    let job_row = b.jobs.get_job(job).await.unwrap().unwrap().row;
    let rows: BTreeMap<Window, _> = b
        .manifest
        .list_entries(job)
        .await
        .unwrap()
        .into_iter()
        .map(|v| (v.row.window, v.row))
        .collect();
    let dead: Vec<Window> = b
        .queue
        .list_dead_letters(1000)
        .await
        .unwrap()
        .iter()
        .filter_map(|d| tilegate_core::message::WindowMessage::decode(&d.body).ok())
        .filter(|m| &m.job_id == job)
        .map(|m| m.window)
        .collect();
    job_row
        .grid
        .windows()
        .map(|w| {
            let state = match rows.get(&w) {
                Some(r) if r.origin == TileOrigin::AlreadyPresent && r.facts.encode_skipped => {
                    "encode-skipped"
                }
                Some(r) if r.origin == TileOrigin::AlreadyPresent => "already-present",
                Some(_) => "written",
                None if dead.contains(&w) => "dead-lettered",
                None => "missing",
            };
            (w, state)
        })
        .collect()
}

/// What Chromium rendered: each cell's state and fill, and the legend's counts.
struct Rendered {
    cells: BTreeMap<String, (String, String)>,
    legend: BTreeMap<String, u64>,
    status: Value,
}

fn rendered(test: &str, page: &Path, name: &str) -> Option<Rendered> {
    let bin = chromium(test)?;
    let shot = artifacts_dir().join(format!("{name}.png"));
    let _ = std::fs::remove_file(&shot);
    let dom = render_in_chromium(&bin, page, &shot, (1200, 2400));
    check_screenshot(&shot);
    let cells = elements(&dom, "rect", "class=\"cell\"")
        .into_iter()
        .map(|a| {
            (
                a["data-window"].clone(),
                (a["data-state"].clone(), a["fill"].clone()),
            )
        })
        .collect();
    let legend = elements(&dom, "li", "data-count=")
        .into_iter()
        .map(|a| (a["data-state"].clone(), a["data-count"].parse().unwrap()))
        .collect();
    let open = "<script type=\"application/json\" id=\"tilegate-status\">";
    let at = dom.find(open).expect("the page embeds its status") + open.len();
    let json = &dom[at..at + dom[at..].find("</script>").unwrap()];
    let status = serde_json::from_str(json).expect("status JSON");
    Some(Rendered {
        cells,
        legend,
        status,
    })
}

/// The screenshot is a real picture of the page: the written colour is on it.
fn check_screenshot(shot: &Path) {
    let ds = gdal::Dataset::open(shot).expect("open the screenshot");
    let (w, h) = ds.raster_size();
    let band = |i| -> Vec<u8> {
        ds.rasterband(i)
            .unwrap()
            .read_as::<u8>((0, 0), (w, h), (w, h), None)
            .unwrap()
            .data()
            .to_vec()
    };
    let (r, g, b) = (band(1), band(2), band(3));
    let green = (0..w * h)
        .filter(|&i| (r[i], g[i], b[i]) == (0x2e, 0x7d, 0x32))
        .count();
    assert!(
        green > 1000,
        "the screenshot {} shows {green} pixels of the written colour",
        shot.display()
    );
}

/// Chromium's DOM agrees with the manifest cell by cell, and the legend and the embedded
/// status with both.
fn assert_page_matches(r: &Rendered, want: &BTreeMap<Window, &'static str>) {
    assert_eq!(r.cells.len(), want.len(), "one cell per window");
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    for (w, state) in want {
        let (got, fill) = &r.cells[&w.to_string()];
        assert_eq!(got, state, "window {w}");
        let s = WindowState::ALL
            .into_iter()
            .find(|s| s.name() == *state)
            .unwrap();
        assert_eq!(fill, colour(s), "colour of window {w}");
        *counts.entry(state).or_default() += 1;
    }
    for s in WindowState::ALL {
        let n = counts.get(s.name()).copied().unwrap_or(0);
        assert_eq!(r.legend[s.name()], n, "legend count of {}", s.name());
        let key = s.name().replace('-', "_");
        assert_eq!(r.status["window_states"][&key], n, "embedded status, {key}");
    }
}

/// The counts `status --json` and the report's embedded status must share.
fn assert_same_counts(report: &Value, status: &Value) {
    for key in [
        "windows",
        "manifest_rows",
        "missing_windows",
        "complete",
        "window_states",
        "duplicates_absorbed",
        "dead_letters_for_job",
        "dead_letters_by_reason",
        "counters",
        "workers",
        "scene_output",
        "job_id",
    ] {
        assert_eq!(
            report[key], status[key],
            "report and status --json disagree on {key}"
        );
    }
}

/// A 400-window job whose windows came to be in place three ways: a worker killed after its
/// Create (the tile in place, no row) leaves one window for a worker that encodes anyway (its
/// Create is refused: already present) and one for a worker that finds the tile first (encode
/// skipped). The report shows 400 cells coloured as the manifest says.
#[test]
fn report_of_a_400_window_job_matches_its_manifest_in_chromium() {
    let test = "report_of_a_400_window_job_matches_its_manifest_in_chromium";
    let tmp = tempdir();
    let data = tmp.path();
    let scene = data.join("scene.tif");
    sample(data, &scene, 2560, 3);
    let plan = tg_json(data, &["plan", scene.to_str().unwrap(), "--window", "128"]);
    assert_eq!(plan["windows"], 400);
    let job = JobId::parse(plan["job_id"].as_str().unwrap()).unwrap();
    // Killed after the 4th window's Create: its tile is in place, its row is not.
    let first = work_one_at_a_time(
        data,
        &[],
        &[
            ("TILEGATE_FAULT", "after-commit"),
            ("TILEGATE_FAULT_SKIP", "3"),
        ],
    );
    assert!(!first.status.success(), "the first worker was to be killed");
    std::thread::sleep(Duration::from_millis(1500));
    // Encodes even when the tile exists: the stranded window's Create is refused (already
    // present); killed after its next window's Create.
    let second = work_one_at_a_time(
        data,
        &["--no-skip-existing"],
        &[
            ("TILEGATE_FAULT", "after-commit"),
            ("TILEGATE_FAULT_SKIP", "1"),
        ],
    );
    assert!(
        !second.status.success(),
        "the second worker was to be killed"
    );
    std::thread::sleep(Duration::from_millis(1500));
    let third = work_one_at_a_time(data, &[], &[]);
    assert!(
        third.status.success(),
        "{}",
        String::from_utf8_lossy(&third.stderr)
    );
    tg_json(data, &["assemble", job.as_str()]);

    let rt = tokio::runtime::Runtime::new().unwrap();
    let want = rt.block_on(states_from_rows(data, &job));
    let count = |s: &str| want.values().filter(|v| **v == s).count();
    assert_eq!(want.len(), 400);
    assert_eq!(count("already-present"), 1, "{want:?}");
    assert_eq!(count("encode-skipped"), 1, "{want:?}");
    assert_eq!(count("written"), 398);

    let page = data.join("report.html");
    let made = tg_json(
        data,
        &["report", job.as_str(), "-o", page.to_str().unwrap()],
    );
    assert_eq!(made["window_states"]["written"], 398);
    let html = std::fs::read_to_string(&page).unwrap();
    for needle in ["<script src", "<link", "@import", "url(http", "src=\"http"] {
        assert!(
            !html.contains(needle),
            "the page is not self-contained: {needle}"
        );
    }
    assert!(
        html.contains("id=\"thumbnail\""),
        "the scene's thumbnail is embedded"
    );
    let Some(r) = rendered(test, &page, "report-400-windows") else {
        return;
    };
    assert_page_matches(&r, &want);
    let status = tg_json(data, &["status", job.as_str()]);
    assert_same_counts(&r.status, &status);
    assert_eq!(status["duplicates_absorbed"], 2);
    let watched = tg(data, &["status", job.as_str(), "--watch"], &[]);
    assert!(
        watched.status.success(),
        "a complete job ends the watch at once"
    );
    assert!(String::from_utf8_lossy(&watched.stdout).contains("400/400 windows"));
    assert_eq!(status["window_states"]["encode_skipped"], 1);
    // Every row says who recorded it and where its time went.
    let b = tilegate_embedded::open_data_dir(data, 3).unwrap();
    let rows = rt.block_on(b.manifest.list_entries(&job)).unwrap();
    assert_eq!(status["workers"].as_array().unwrap().len(), 3);
    for r in rows.iter().map(|v| &v.row) {
        assert!(r.facts.attempt >= 1 && !r.facts.worker.is_empty(), "{r:?}");
        assert!(
            r.facts.wait_ms.is_some() && r.facts.commit_ms.is_some(),
            "{r:?}"
        );
        if !r.facts.encode_skipped {
            assert!(
                r.facts.read_ms.is_some() && r.facts.encode_ms.is_some(),
                "{r:?}"
            );
        }
    }
}

/// A poison window is dead-lettered after its receives and a lost message leaves its window
/// missing: the report shows both as such, the dead letter with its reason on hover.
#[test]
fn report_shows_a_dead_lettered_and_a_missing_window() {
    let test = "report_shows_a_dead_lettered_and_a_missing_window";
    let tmp = tempdir();
    let data = tmp.path();
    let scene = data.join("scene.tif");
    sample(data, &scene, 2048, 4);
    let plan = tg_json(data, &["plan", scene.to_str().unwrap(), "--window", "256"]);
    assert_eq!(plan["windows"], 64);
    let job = JobId::parse(plan["job_id"].as_str().unwrap()).unwrap();
    // Lose one message: received and deleted without any work (the first, window 0000_0000).
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let b = tilegate_embedded::open_data_dir(data, 3).unwrap();
        let got = b
            .queue
            .receive(ReceiveOptions {
                max: 1,
                wait: Duration::ZERO,
                visibility: Duration::from_secs(60),
            })
            .await
            .unwrap();
        b.queue.ack(&got[0].receipt).await.unwrap();
    });
    let out = work_one_at_a_time(data, &[], &[("TILEGATE_PANIC_WINDOWS", "0003_0005")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = rt.block_on(states_from_rows(data, &job));
    assert_eq!(want[&Window::new(0, 0)], "missing");
    assert_eq!(want[&Window::new(3, 5)], "dead-lettered");
    assert_eq!(want.values().filter(|s| **s == "written").count(), 62);

    let page = data.join("report.html");
    tg_json(
        data,
        &["report", job.as_str(), "-o", page.to_str().unwrap()],
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("0003_0005 dead-lettered"),
        "the dead letter's cell names it"
    );
    assert!(html.contains("encoder-panicked"), "its reason is on hover");
    assert!(html.contains("Not assembled yet"));
    let Some(r) = rendered(test, &page, "report-dead-letter-and-missing") else {
        return;
    };
    assert_page_matches(&r, &want);
    assert_eq!(r.cells["0003_0005"].0, "dead-lettered");
    assert_eq!(r.cells["0000_0000"].0, "missing");
    let status = tg_json(data, &["status", job.as_str()]);
    assert_same_counts(&r.status, &status);
    assert_eq!(status["dead_letters_by_reason"]["encoder-panicked"], 1);
    assert_eq!(status["window_states"]["missing"], 1);
    assert_eq!(status["complete"], false);

    // The live view follows a resumed job (the lost window and the poison one enqueued again)
    // and ends by itself once nothing is left but a dead letter: exit 3, plain lines on a pipe.
    let resumed = tg_json(
        data,
        &[
            "plan",
            scene.to_str().unwrap(),
            "--window",
            "256",
            "--resume",
        ],
    );
    assert_eq!(resumed["enqueued"], 2);
    let watch = std::process::Command::new(tilegate_tests::tilegate_bin())
        .arg("--data")
        .arg(data)
        .args(["status", job.as_str(), "--watch", "--interval", "0.2"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = work_one_at_a_time(data, &[], &[("TILEGATE_PANIC_WINDOWS", "0003_0005")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let watched = watch.wait_with_output().unwrap();
    assert_eq!(watched.status.code(), Some(3), "the watch ends incomplete");
    let lines = String::from_utf8(watched.stdout).unwrap();
    let last = lines.lines().last().unwrap_or_default();
    assert!(
        last.contains("63/64 windows") && last.contains("1 dead-lettered"),
        "{lines}"
    );
    assert!(
        !lines.contains('\x1b'),
        "no terminal control on a pipe: {lines}"
    );
}

/// The scene's STAC Item, on each backend: published beside the scene, valid for
/// `stac-validator` (core, projection, raster and file extensions), its size and checksum the
/// scene's, and untouched by a second run of the same job (same ETag and LastModified).
fn the_scene_stac_item_validates_and_a_second_run_leaves_it(target: Target) {
    let tmp = tempdir();
    let data = tmp.path();
    let scene = data.join("scene.tif");
    sample(data, &scene, 1024, 5);
    let src = scene.to_str().unwrap();
    // The source says when it was made: the Item's datetime.
    let edit = std::process::Command::new("gdal_edit.py")
        .args(["-mo", "TIFFTAG_DATETIME=2024:06:30 10:15:00", src])
        .output()
        .expect("run gdal_edit.py (gdal-bin)");
    assert!(
        edit.status.success(),
        "{}",
        String::from_utf8_lossy(&edit.stderr)
    );
    let first = target.json(data, &["run", src, "--window", "256"]);
    let job = first["job_id"].as_str().unwrap().to_owned();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let b = rt.block_on(target.backends(data));
    let row = rt
        .block_on(b.jobs.get_job(&JobId::parse(&job).unwrap()))
        .unwrap()
        .unwrap()
        .row;
    let scene_ref = row.scene_output.expect("the scene is recorded");
    let item_key = tilegate_stac::item_key(&scene_ref.key).unwrap();
    let item_bytes = rt.block_on(b.objects.get_bytes(&item_key)).unwrap().bytes;
    let path = data.join("item.json");
    std::fs::write(&path, &item_bytes).unwrap();
    validate_stac(&path).unwrap_or_else(|e| panic!("{}: {e}", target.name()));

    let item: Value = serde_json::from_slice(&item_bytes).unwrap();
    let scene_bytes = rt
        .block_on(b.objects.get_bytes(&object_key(&scene_ref.key)))
        .unwrap()
        .bytes;
    let asset = &item["assets"]["data"];
    assert_eq!(asset["file:size"], scene_bytes.len() as u64);
    assert_eq!(
        asset["file:checksum"],
        tilegate_stac::blake3_multihash(blake3::hash(&scene_bytes).as_bytes())
    );
    assert_eq!(asset["type"], tilegate_stac::COG_MEDIA_TYPE);
    assert_eq!(asset["raster:bands"][0]["data_type"], "uint16");
    assert_eq!(item["id"], job.as_str());
    assert_eq!(item["properties"]["proj:code"], "EPSG:32633");
    assert_eq!(item["properties"]["datetime"], "2024-06-30T10:15:00Z");
    assert_eq!(
        item["properties"]["proj:shape"],
        serde_json::json!([1024, 1024])
    );
    let bbox: Vec<f64> = serde_json::from_value(item["bbox"].clone()).unwrap();
    assert!(
        bbox[0] >= 14.9 && bbox[2] <= 15.2 && bbox[1] > 44.0 && bbox[3] < 46.0,
        "{bbox:?}"
    );

    let before = rt.block_on(b.objects.head(&item_key)).unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    let second = target.json(data, &["run", src, "--window", "256"]);
    assert_eq!(second["job_id"], job.as_str());
    let after = rt.block_on(b.objects.head(&item_key)).unwrap().unwrap();
    assert_eq!(
        (&after.e_tag, after.last_modified),
        (&before.e_tag, before.last_modified),
        "{}: a second run touched the Item",
        target.name()
    );

    // A Collection over the job's Item validates too.
    let collection = data.join("collection.json");
    target.json(
        data,
        &[
            "stac",
            &job,
            "--stac-collection",
            collection.to_str().unwrap(),
        ],
    );
    validate_stac(&collection).unwrap_or_else(|e| panic!("{}: {e}", target.name()));
}

per_backend!(the_scene_stac_item_validates_and_a_second_run_leaves_it);

/// The operation of one request that reached the emulator, as the SDK names it: the
/// `X-Amz-Target` of DynamoDB's and SQS's JSON protocols, S3's method (compared by method).
fn operation(line: &str, target: Option<&str>) -> (String, String) {
    if let Some(t) = target {
        let (prefix, op) = t.split_once('.').unwrap_or(("", t));
        let service = if prefix.starts_with("DynamoDB") {
            "dynamodb"
        } else {
            "sqs"
        };
        return (service.to_owned(), op.to_owned());
    }
    let method = line.split(' ').next().unwrap_or("");
    ("s3".to_owned(), method.to_owned())
}

/// Run `tilegate ARGS` against the AWS emulator through counting proxies: its JSON output and
/// the requests the emulator received, by (service, operation or S3 method).
fn counted_by_the_emulator(
    aws: &Aws,
    data: &Path,
    args: &[&str],
) -> (Value, BTreeMap<(String, String), u64>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let s3_and_dynamo = std::env::var("AWS_ENDPOINT_URL").expect("the emulator's endpoint");
    let sqs = std::env::var("AWS_ENDPOINT_URL_SQS").unwrap_or_else(|_| s3_and_dynamo.clone());
    let (p1, p2) = rt.block_on(async {
        (
            LossyProxy::start(&s3_and_dynamo).await,
            LossyProxy::start(&sqs).await,
        )
    });
    let out = aws.run(
        data,
        args,
        &[
            ("AWS_ENDPOINT_URL", &p1.url),
            ("AWS_ENDPOINT_URL_SQS", &p2.url),
        ],
    );
    let doc: Value = tilegate_tests::json_of(args, &out);
    let mut seen: BTreeMap<(String, String), u64> = BTreeMap::new();
    for (line, target) in p1.requests().iter().chain(&p2.requests()) {
        *seen.entry(operation(line, target.as_deref())).or_default() += 1;
    }
    (doc, seen)
}

/// The HTTP method of an S3 operation tilegate sends.
fn s3_method(op: &str) -> &'static str {
    match op {
        "PutObject" | "UploadPart" | "CreateBucket" => "PUT",
        "GetObject" | "ListObjectsV2" | "ListMultipartUploads" | "ListParts" => "GET",
        "HeadObject" | "HeadBucket" => "HEAD",
        "CreateMultipartUpload" | "CompleteMultipartUpload" => "POST",
        "DeleteObject" | "AbortMultipartUpload" => "DELETE",
        other => panic!("an S3 operation this test does not know: {other}"),
    }
}

/// The AWS emulator's names for `test` with its bucket, tables and queue made, and a sample
/// scene of `size`² in the test's data directory; `None` without an emulator outside CI.
fn aws_with_scene(
    test: &str,
    size: u32,
    seed: u64,
) -> Option<(Aws, tempfile::TempDir, std::path::PathBuf)> {
    let aws = Aws::for_test(test)?;
    let tmp = tempdir();
    let data = tmp.path();
    aws.json(data, &["init", "--create-bucket"]);
    let scene = data.join("scene.tif");
    sample(data, &scene, size, seed);
    Some((aws, tmp, scene))
}

/// `status --cost` after a run on the AWS emulator reports, operation by operation, exactly
/// the requests that reached the emulator (counted by a proxy in front of it), and prices them
/// from the default table.
#[test]
fn status_cost_equals_the_requests_the_emulator_saw() {
    let Some((aws, tmp, scene)) =
        aws_with_scene("status_cost_equals_the_requests_the_emulator_saw", 1024, 6)
    else {
        return;
    };
    let data = tmp.path();
    let (run, seen) = counted_by_the_emulator(
        &aws,
        data,
        &["--json", "run", scene.to_str().unwrap(), "--window", "256"],
    );
    assert_eq!(run["complete"], true);
    let job = run["job_id"].as_str().unwrap();

    let status = aws.json(data, &["status", job, "--cost"]);
    let mut counted: BTreeMap<(String, String), u64> = BTreeMap::new();
    for l in status["cost"]["lines"].as_array().unwrap() {
        let service = l["service"].as_str().unwrap().to_owned();
        let op = l["op"].as_str().unwrap();
        let key = if service == "s3" {
            s3_method(op).to_owned()
        } else {
            op.to_owned()
        };
        *counted.entry((service, key)).or_default() += l["requests"].as_u64().unwrap();
    }
    assert_eq!(
        counted, seen,
        "requests counted for the job (left) and seen by the emulator (right)"
    );
    let total: u64 = seen.values().sum();
    assert_eq!(status["cost"]["requests"], total);
    assert!(seen[&("s3".to_owned(), "PUT".to_owned())] >= 16, "{seen:?}");
    assert!(
        seen[&("sqs".to_owned(), "SendMessageBatch".to_owned())] >= 2,
        "{seen:?}"
    );
    // Priced from the default table: every line has a price, the total is their sum.
    let lines = status["cost"]["lines"].as_array().unwrap();
    let sum: f64 = lines.iter().map(|l| l["usd"].as_f64().unwrap()).sum();
    assert!(
        lines.iter().all(|l| l["usd_per_request"].is_f64()),
        "{lines:?}"
    );
    assert!(sum > 0.0);
    assert!((status["cost"]["total_usd"].as_f64().unwrap() - sum).abs() < 1e-12);
    assert_eq!(status["cost"]["price_table_date"], "2026-12-03");
    let text = aws.run(data, &["status", job, "--cost"], &[]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("PutObject") && text.contains("total"),
        "{text}"
    );
}

/// What a clean run's windows cost on AWS, as the emulator saw it (a proxy counting every
/// request in front of it): one PUT of the tile and one manifest row per window (a transaction
/// with its partition's row counter, and nothing else on DynamoDB per window), no HEAD at all
/// (a first delivery of a window planned without a row goes straight to the create-if-absent
/// PUT, whose answer has the ETag the row records; a local source is pinned by its stat), the
/// acknowledgements ten to a `DeleteMessageBatch`, and receives in batches.
#[test]
fn a_clean_aws_work_stage_sends_a_put_a_row_and_a_tenth_of_an_ack_per_window() {
    let Some((aws, tmp, scene)) = aws_with_scene(
        "a_clean_aws_work_stage_sends_a_put_a_row_and_a_tenth_of_an_ack_per_window",
        2048,
        8,
    ) else {
        return;
    };
    let data = tmp.path();
    let plan = aws.json(data, &["plan", scene.to_str().unwrap(), "--window", "256"]);
    assert_eq!(plan["windows"], 64);
    let job = plan["job_id"].as_str().unwrap().to_owned();
    let (work, seen) = counted_by_the_emulator(&aws, data, &["--json", "work", "--until-empty"]);
    assert_eq!(work["written"], 64, "{work}");
    let n = |service: &str, op: &str| {
        seen.get(&(service.to_owned(), op.to_owned()))
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(
        n("s3", "PUT"),
        64,
        "one create-if-absent PUT per tile: {seen:?}"
    );
    assert_eq!(n("s3", "HEAD"), 0, "no HEAD on a clean run: {seen:?}");
    assert_eq!(
        n("dynamodb", "TransactWriteItems"),
        64,
        "one manifest row and its count per window: {seen:?}"
    );
    assert!(
        n("dynamodb", "PutItem") + n("dynamodb", "GetItem") < 64,
        "no other DynamoDB request per window: {seen:?}"
    );
    assert_eq!(
        n("sqs", "DeleteMessage"),
        0,
        "acknowledged in batches: {seen:?}"
    );
    let batches = n("sqs", "DeleteMessageBatch");
    assert!(
        (7..=12).contains(&batches),
        "64 acknowledgements in {batches} batches: {seen:?}"
    );
    let receives = n("sqs", "ReceiveMessage");
    assert!(
        receives <= 32,
        "{receives} receives for 64 windows: {seen:?}"
    );
    let status = aws.json(data, &["status", &job]);
    assert_eq!(status["manifest_rows"], 64);
    assert_eq!(
        status["queue"]["in_flight"], 0,
        "every message acknowledged"
    );
    assert_eq!(status["queue"]["visible"], 0);
}

/// The GCS and Azure stores count their requests for the job too (a middleware of each
/// client's HTTP stack): one upload per tile at least, priced from the default table.
#[test]
fn gcs_and_azure_requests_are_counted_for_the_job() {
    let _ = tilegate_tests::gcs_emulator();
    let account = tilegate_tests::azure_emulator();
    let targets = [
        (
            "gcs",
            "insert",
            format!("gs://{}/cost", tilegate_tests::unique("tg-cost")),
        ),
        (
            "azure",
            "PutBlob",
            format!(
                "az://{}/{}/cost",
                account.name,
                tilegate_tests::azure_container()
            ),
        ),
    ];
    for (service, upload, url) in targets {
        let target = Target::Objects(url);
        let tmp = tempdir();
        let data = tmp.path();
        target.json(data, &["init", "--create-bucket"]);
        let scene = data.join("scene.tif");
        sample(data, &scene, 1024, 7);
        let run = target.json(data, &["run", scene.to_str().unwrap(), "--window", "256"]);
        assert_eq!(run["windows"], 16);
        let status = target.json(data, &["status", run["job_id"].as_str().unwrap(), "--cost"]);
        let lines = status["cost"]["lines"].as_array().unwrap();
        let uploads = cost_requests(&status["cost"], service, upload);
        // 16 tiles, the scene and its Item, each one single-request upload.
        assert!(
            uploads >= 18,
            "{service}: {uploads} uploads counted: {lines:?}"
        );
        assert!(
            lines
                .iter()
                .filter(|l| l["service"] == service)
                .all(|l| l["usd_per_request"].is_f64()),
            "{service}: every line priced: {lines:?}"
        );
        // GCS's single-request uploads are multipart streams whose length the client's
        // middleware cannot see; Azure's bodies are counted.
        if service == "azure" {
            assert!(
                status["cost"]["bytes_sent"].as_u64().unwrap() > 0,
                "{service}"
            );
        }
        assert!(
            status["cost"]["bytes_received"].as_u64().unwrap() > 0,
            "{service}"
        );
    }
}

/// A scene whose CRS has no EPSG code: its Item names the CRS as PROJJSON (`proj:code` null),
/// and still validates.
#[test]
fn an_item_names_a_crs_without_an_epsg_code_in_projjson() {
    let tmp = tempdir();
    let data = tmp.path();
    let sample_path = data.join("sample.tif");
    sample(data, &sample_path, 512, 8);
    let scene = data.join("polar.tif");
    let srs = "+proj=stere +lat_0=90 +lat_ts=71 +lon_0=-33 +x_0=0 +y_0=0 +datum=WGS84 +units=m";
    let out = std::process::Command::new("gdal_translate")
        .args([
            "-q", "-a_srs", srs, "-a_ullr", "100000", "-1900000", "105120", "-1905120",
        ])
        .arg(&sample_path)
        .arg(&scene)
        .output()
        .expect("run gdal_translate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = tg_json(data, &["run", scene.to_str().unwrap(), "--window", "256"]);
    let job = run["job_id"].as_str().unwrap();
    let item_path = data
        .join("objects")
        .join(tilegate_core::Prefix::DEFAULT)
        .join("scenes")
        .join(format!("{job}.json"));
    validate_stac(&item_path).unwrap();
    let item: Value = serde_json::from_slice(&std::fs::read(&item_path).unwrap()).unwrap();
    assert_eq!(item["properties"]["proj:code"], Value::Null);
    let pj = &item["properties"]["proj:projjson"];
    assert_eq!(pj["type"], "ProjectedCRS", "{pj}");
    let bbox: Vec<f64> = serde_json::from_value(item["bbox"].clone()).unwrap();
    assert!(bbox[1] > 60.0 && bbox[3] < 90.0, "a polar scene: {bbox:?}");
}

/// The requests a `cost` section (of `status --cost` or `plan --estimate`) has for one
/// service's operation.
fn cost_requests(cost: &Value, service: &str, op: &str) -> u64 {
    cost["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["service"] == service && l["op"] == op)
        .map(|l| l["requests"].as_u64().unwrap())
        .sum()
}

/// Within `pct` percent of `actual`.
fn near(estimated: f64, actual: f64, pct: f64) -> bool {
    (estimated - actual).abs() <= actual.abs() * pct / 100.0
}

/// `plan --estimate` before a job runs on the AWS emulator agrees with `status --cost` of the
/// same job afterwards: the total and the request count within 10 %, the PUTs (most of the
/// cost) exactly; and the estimate planned nothing (no job row, no message enqueued).
#[test]
fn plan_estimate_agrees_with_status_cost_of_the_run() {
    let Some((aws, tmp, scene)) =
        aws_with_scene("plan_estimate_agrees_with_status_cost_of_the_run", 2048, 9)
    else {
        return;
    };
    let data = tmp.path();
    let s = scene.to_str().unwrap();
    let est = aws.json(data, &["plan", s, "--window", "256", "--estimate"]);
    assert_eq!(est["windows"], 64, "{est}");
    assert_eq!(est["already_planned"], false);
    assert_eq!(est["sampled_windows"], 4);
    assert_eq!(
        est["billed_services"],
        serde_json::json!(["s3", "dynamodb", "sqs"])
    );

    // Nothing was planned: no job row, nothing on the queue.
    let status = aws.run(data, &["--json", "status"], &[]);
    assert!(!status.status.success());
    let err: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(err["error"]["reason"], "no-job", "{err}");
    let idle = aws.json(data, &["work", "--until-empty"]);
    assert_eq!(idle["handled"], 0, "the estimate enqueued nothing: {idle}");

    let run = aws.json(data, &["run", s, "--window", "256"]);
    assert_eq!(
        run["job_id"], est["job_id"],
        "the estimate names the job run gives"
    );
    assert_eq!(run["complete"], true);
    let cost = &aws.json(data, &["status", run["job_id"].as_str().unwrap(), "--cost"])["cost"];
    let e = &est["cost"];
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap();
    assert!(
        near(f(e, "total_usd"), f(cost, "total_usd"), 10.0),
        "estimated {} USD, counted {} USD: {e:#} {cost:#}",
        e["total_usd"],
        cost["total_usd"]
    );
    assert!(
        near(f(e, "requests"), f(cost, "requests"), 10.0),
        "estimated {} requests, counted {}",
        e["requests"],
        cost["requests"]
    );
    for op in ["PutObject", "GetObject"] {
        assert_eq!(
            cost_requests(e, "s3", op),
            cost_requests(cost, "s3", op),
            "{op}"
        );
    }
    // The tiles' bytes, predicted from four encoded windows, within a quarter.
    assert!(
        near(f(e, "stored_bytes"), f(cost, "stored_bytes"), 25.0),
        "estimated {} bytes stored, counted {}",
        e["stored_bytes"],
        cost["stored_bytes"]
    );
}

/// On the embedded backend an estimate prices nothing (its stores are local) and still says
/// the windows and the bytes the job would write; it plans nothing.
#[test]
fn plan_estimate_on_the_embedded_backend_bills_nothing_and_plans_nothing() {
    let tmp = tempdir();
    let data = tmp.path();
    let scene = data.join("scene.tif");
    sample(data, &scene, 512, 3);
    let s = scene.to_str().unwrap();
    let est = tg_json(data, &["plan", s, "--window", "128", "--estimate"]);
    assert_eq!(est["windows"], 16);
    assert_eq!(est["billed_services"], serde_json::json!([]));
    assert_eq!(est["cost"]["requests"], 0);
    assert_eq!(est["cost"]["total_usd"], 0.0);
    assert!(est["tile_bytes"].as_u64().unwrap() > 0, "{est}");
    let text =
        String::from_utf8(tg(data, &["plan", s, "--window", "128", "--estimate"], &[]).stdout)
            .unwrap();
    assert!(text.contains("nothing planned"), "{text}");
    assert!(text.contains("no billed requests"), "{text}");
    let planned = tg_json(data, &["plan", s, "--window", "128"]);
    assert_eq!(planned["job_id"], est["job_id"]);
    assert_eq!(
        planned["newly_planned"], true,
        "the estimate wrote no job row"
    );
    let again = tg_json(data, &["plan", s, "--window", "128", "--estimate"]);
    assert_eq!(again["already_planned"], true);
}

/// A scene published on the AWS emulator is announced once on an SNS topic (read through an
/// SQS subscription) and once on an EventBridge bus (read through a rule targeting a queue),
/// each message carrying the job's idempotency key and the scene's STAC Item, which passes
/// `stac-validator`. moto serves SNS and EventBridge on the SQS server, where the queues live.
#[test]
fn a_published_scene_is_announced_on_sns_and_eventbridge() {
    use tilegate_aws::aws_sdk_eventbridge as eb;
    let Some((aws, tmp, scene)) = aws_with_scene(
        "a_published_scene_is_announced_on_sns_and_eventbridge",
        512,
        4,
    ) else {
        return;
    };
    let data = tmp.path();
    let sqs_url = tilegate_tests::aws::sns_endpoint();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tag = format!(
        "ann{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    let (topic, sns_queue, eb_queue, sqs) = rt.block_on(async {
        use tilegate_tests::aws::{queue_with_arn, sns_clients, topic_with_queue};
        let sdk = tilegate_aws::config::load_sdk_config().await;
        let sqs = tilegate_aws::config::sqs_client(&sdk);
        let (_, events) = sns_clients(&sdk);
        let (topic, sns_queue) = topic_with_queue(&sdk, &format!("{tag}-scenes")).await;
        let (eb_queue, eb_arn) = queue_with_arn(&sqs, &format!("{tag}-eb")).await;
        events
            .put_rule()
            .name(format!("{tag}-rule"))
            .event_pattern(r#"{"source":["tilegate"]}"#)
            .send()
            .await
            .unwrap();
        events
            .put_targets()
            .rule(format!("{tag}-rule"))
            .targets(
                eb::types::Target::builder()
                    .id("q")
                    .arn(&eb_arn)
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap();
        (topic, sns_queue, eb_queue, sqs)
    });
    let sinks = format!("sns:{topic},eventbridge:default");
    let out = aws.run(
        data,
        &[
            "--json",
            "run",
            scene.to_str().unwrap(),
            "--window",
            "256",
            "--announce",
            &sinks,
        ],
        &[
            ("AWS_ENDPOINT_URL_SNS", &sqs_url),
            ("AWS_ENDPOINT_URL_EVENTBRIDGE", &sqs_url),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    let job = run["job_id"].as_str().unwrap().to_owned();
    let st = aws.json(data, &["status", &job]);
    let delivered = &st["announcements"][0]["delivered"];
    assert_eq!(
        delivered,
        &serde_json::json!(["eventbridge:default", format!("sns:{topic}")]),
        "{st}"
    );
    let receive = |url: &str| -> Vec<String> { rt.block_on(tilegate_tests::aws::drain(&sqs, url)) };
    let via_sns = receive(&sns_queue);
    assert_eq!(via_sns.len(), 1, "{via_sns:?}");
    let envelope: Value = serde_json::from_str(&via_sns[0]).unwrap();
    let from_sns: Value = serde_json::from_str(envelope["Message"].as_str().unwrap()).unwrap();
    let via_eb = receive(&eb_queue);
    assert_eq!(via_eb.len(), 1, "{via_eb:?}");
    let event: Value = serde_json::from_str(&via_eb[0]).unwrap();
    assert_eq!(event["source"], "tilegate");
    assert_eq!(event["detail-type"], "tilegate.job.published");
    let from_eb = &event["detail"];
    for m in [&from_sns, from_eb] {
        assert_eq!(m["type"], "tilegate.job.published", "{m}");
        assert!(
            m["idempotency_key"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{job}:published:")),
            "{m}"
        );
        assert_eq!(m["item"]["id"], job.as_str());
    }
    assert_eq!(from_sns["idempotency_key"], from_eb["idempotency_key"]);
    let item = data.join("announced.json");
    std::fs::write(&item, serde_json::to_vec(&from_sns["item"]).unwrap()).unwrap();
    validate_stac(&item).unwrap();
}

/// A job of more than `GRID_ELEMENTS_MAX` windows: its report draws the grid as one image, a
/// pixel per window in its state's colour, not 10,000 SVG elements, and stays small (a
/// 102,400-window job's page went from 25.8 MB to 22 KB).
#[test]
fn a_large_jobs_report_draws_its_grid_as_an_image() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let scene = tmp.path().join("scene.tif");
    // 101 × 101 windows of 32 pixels.
    sample(&data, &scene, 3232, 8);
    let p = tg_json(
        &data,
        &[
            "plan",
            scene.to_str().unwrap(),
            "--window",
            "32",
            "--recipe",
            "noop",
        ],
    );
    let job = p["job_id"].as_str().unwrap().to_owned();
    assert_eq!(p["windows"], 10_201);
    let out = tg(&data, &["work", "--until-empty", "--threads", "2"], &[]);
    assert!(out.status.success());
    let page = tmp.path().join("report.html");
    tg_json(&data, &["report", &job, "--out", page.to_str().unwrap()]);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.len() < 100_000, "{} bytes", html.len());
    assert!(!html.contains("class=\"cell\""));
    let src = html
        .split("<img id=\"grid\"")
        .nth(1)
        .and_then(|s| s.split("data:image/png;base64,").nth(1))
        .and_then(|s| s.split('"').next())
        .expect("the grid image");
    let png = base64_decode(src);
    assert_eq!(&png[12..16], b"IHDR");
    assert_eq!(u32::from_be_bytes(png[16..20].try_into().unwrap()), 101);
    assert_eq!(u32::from_be_bytes(png[20..24].try_into().unwrap()), 101);
    // The palette's first colour is `written`'s: every window is written.
    let plte = png.windows(4).position(|w| w == b"PLTE").unwrap();
    let written = colour(WindowState::Written);
    assert_eq!(
        format!(
            "#{:02x}{:02x}{:02x}",
            png[plte + 4],
            png[plte + 5],
            png[plte + 6]
        ),
        written
    );
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').map(val).collect();
    bytes
        .chunks(4)
        .flat_map(|c| {
            let n = c.iter().fold(0u32, |acc, &v| (acc << 6) | u32::from(v)) << (6 * (4 - c.len()));
            let b = n.to_be_bytes();
            b[1..c.len()].to_vec()
        })
        .collect()
}
