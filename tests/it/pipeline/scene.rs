//! The scene stage through the binary: the assembled COG is valid and pixel-identical, eight
//! racing assemblers upload once, a lapsed lease is taken over, a short manifest is refused,
//! and `repair` never clobbers a newer tile.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tilegate_core::object::{ObjectStoreExt, PutOptions};
use tilegate_core::table::TileOrigin;
use tilegate_core::{JobId, Window, now_millis};
use tilegate_tests::{
    assert_scene_matches_source, sample, tempdir, tg, tg_json, tilegate_bin, work_until_fault,
};
use tilegate_worker::repair::{self, RepairOutcome};

fn scene_path(data: &Path, job: &str) -> std::path::PathBuf {
    data.join("objects/tilegate/scenes")
        .join(format!("{job}.tif"))
}

fn sample_with(data: &Path, path: &Path, args: &[&str]) {
    let mut a = vec!["sample-scene", path.to_str().unwrap()];
    a.extend_from_slice(args);
    let out = tg(data, &a, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn assembled_scene_is_a_valid_cog_equal_to_its_source() {
    let cases: &[(&str, &[&str])] = &[
        ("u16-exact", &["--size", "2048"]),
        (
            "byte-3band-nodata-partial",
            &[
                "--width", "1300", "--height", "900", "--bands", "3", "--dtype", "Byte",
                "--nodata", "0",
            ],
        ),
        (
            "i16-2band-partial",
            &[
                "--width", "1000", "--height", "1100", "--bands", "2", "--dtype", "Int16",
                "--nodata", "-32768",
            ],
        ),
        (
            "f32-nodata",
            &[
                "--width", "1024", "--height", "700", "--dtype", "Float32", "--nodata", "-9999",
            ],
        ),
    ];
    for (name, args) in cases {
        let tmp = tempdir();
        let data = tmp.path();
        let src = data.join(format!("{name}.tif"));
        sample_with(data, &src, args);
        let window = if name.contains("partial") {
            "256"
        } else {
            "512"
        };
        let run = tg_json(data, &["run", src.to_str().unwrap(), "--window", window]);
        assert_eq!(run["complete"], true, "{name}: {run}");
        assert_eq!(run["scene"]["outcome"], "written", "{name}: {run}");
        let job = run["job_id"].as_str().unwrap();
        assert_scene_matches_source(&scene_path(data, job), &src);
        let status = tg_json(data, &["status", job]);
        assert_eq!(
            status["scene_output"]["e_tag"], run["scene"]["scene_etag"],
            "{name}"
        );
    }
}

/// `run` assembles with the first overview level its encoders computed and uploads in parts;
/// the scene must be byte for byte the one `assemble` makes by decoding the same tiles and
/// writing the file whole.
#[test]
fn run_reuses_its_encoders_reductions_byte_for_byte() {
    let cases: &[(&str, &[&str], &str, u64)] = &[
        ("u16-average", &["--size", "2048"], "average", 16),
        (
            "byte-3band-nodata-partial-nearest",
            &[
                "--width", "1300", "--height", "900", "--bands", "3", "--dtype", "Byte",
                "--nodata", "0",
            ],
            "nearest",
            24,
        ),
        (
            "f32-nodata-partial-average",
            &[
                "--width", "1024", "--height", "700", "--dtype", "Float32", "--nodata", "-9999",
            ],
            "average",
            12,
        ),
        // Odd: the first level is not made of whole windows; nothing is reused.
        (
            "u16-odd",
            &["--width", "1001", "--height", "999"],
            "average",
            0,
        ),
    ];
    for (name, args, resampling, reused) in cases {
        let tmp = tempdir();
        let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
        let src = tmp.path().join(format!("{name}.tif"));
        sample_with(&one, &src, args);
        let window = if *reused == 16 { "512" } else { "256" };
        let common = ["--window", window, "--resampling", resampling];
        let mut a = vec!["run", src.to_str().unwrap()];
        a.extend_from_slice(&common);
        // In parts cut from the laid-out scene here; whole, in one PUT, below.
        let mut parts = a.clone();
        parts.extend(["--multipart-threshold", "1048576", "--part-size", "5242880"]);
        let run = tg_json(&one, &parts);
        assert_eq!(run["scene"]["outcome"], "written", "{name}: {run}");
        assert_eq!(
            run["scene"]["reduced_windows_reused"], *reused,
            "{name}: {run}"
        );
        a.push("--no-assemble");
        tg_json(&two, &a);
        let asm = tg_json(&two, &["assemble", "--resampling", resampling]);
        assert_eq!(asm["reduced_windows_reused"], 0, "{name}: {asm}");
        let job = run["job_id"].as_str().unwrap();
        let (x, y) = (scene_path(&one, job), scene_path(&two, job));
        assert!(
            std::fs::read(&x).unwrap() == std::fs::read(&y).unwrap(),
            "{name}: {} and {} differ",
            x.display(),
            y.display()
        );
        assert_eq!(run["scene"]["scene_etag"], asm["scene_etag"], "{name}");
        assert_scene_matches_source(&x, &src);
    }
}

fn spawn_assemble(data: &Path, extra: &[&str]) -> std::process::Child {
    spawn_assemble_on(data, &[], extra)
}

/// `assemble` with the global flags `global` (an `--objects` URL), in the background.
fn spawn_assemble_on(data: &Path, global: &[&str], extra: &[&str]) -> std::process::Child {
    Command::new(tilegate_bin())
        .arg("--data")
        .arg(data)
        .args(global)
        .args([
            "--json",
            "assemble",
            "--multipart-threshold",
            "1048576",
            "--part-size",
            "5242880",
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start assembler")
}

fn finish(child: std::process::Child) -> Value {
    tilegate_tests::assembler_doc(&child.wait_with_output().unwrap())
}

#[test]
fn eight_racing_assemblers_upload_the_scene_once() {
    racing_assemblers(None);
}

/// The same race on GCS: the scene is a resumable session per claim winner; the claim gate
/// keeps every loser from starting one (fake-gcs-server does not evaluate a session's
/// precondition at finalisation, so here the gate alone is what is proven; the precondition
/// the session carries is covered by `scripted_gcs`).
#[test]
fn eight_racing_assemblers_upload_the_scene_once_on_gcs() {
    let _ = tilegate_tests::gcs_emulator();
    racing_assemblers_on(&format!("gs://{}/out", tilegate_tests::unique("tg-race")));
}

/// The same race on Azure Blob: the scene is a block list per claim winner, committed with
/// `If-None-Match: *` (which Azurite evaluates); the claim gate keeps every loser from staging
/// a block.
#[test]
fn eight_racing_assemblers_upload_the_scene_once_on_azure() {
    let account = tilegate_tests::azure_emulator();
    racing_assemblers_on(&format!(
        "az://{}/{}/out",
        account.name,
        tilegate_tests::azure_container()
    ));
}

/// [`racing_assemblers`] on a cloud store, whose bucket or container `tilegate init` creates.
fn racing_assemblers_on(url: &str) {
    let init = tg(
        Path::new("/nonexistent"),
        &["--objects", url, "init", "--create-bucket"],
        &[],
    );
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    racing_assemblers(Some(url));
}

/// Eight assemblers of one job at once (objects at `objects`, or embedded): one uploads the
/// scene, the others upload 0 bytes; the scene matches the source; nothing is left behind.
fn racing_assemblers(objects: Option<&str>) {
    let tmp = tempdir();
    let data = tmp.path();
    let global: Vec<&str> = objects.map(|o| vec!["--objects", o]).unwrap_or_default();
    let with = |args: &[&str]| -> Vec<String> {
        global.iter().chain(args).map(|s| (*s).to_owned()).collect()
    };
    let json = |args: &[&str]| {
        let a = with(args);
        tg_json(data, &a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let src = data.join("scene.tif");
    sample(data, &src, 2048, 5);
    let run = json(&["run", src.to_str().unwrap(), "--no-assemble"]);
    let job = run["job_id"].as_str().unwrap().to_owned();

    let children: Vec<_> = (0..8)
        .map(|_| spawn_assemble_on(data, &global, &[&job]))
        .collect();
    let docs: Vec<Value> = children.into_iter().map(finish).collect();
    let winners: Vec<&Value> = docs.iter().filter(|d| d["outcome"] == "written").collect();
    assert_eq!(winners.len(), 1, "{docs:#?}");
    let size = winners[0]["scene_size"].as_u64().unwrap();
    assert!(size > 1_048_576, "the scene must take the multipart path");
    assert_eq!(winners[0]["multipart"], true);
    assert_eq!(winners[0]["multipart_bytes_uploaded_total"], size);
    assert_eq!(winners[0]["claims_won_total"], 1);
    for d in docs.iter().filter(|d| d["outcome"] != "written") {
        assert!(
            d["outcome"] == "held_by" || d["outcome"] == "already_done",
            "{d}"
        );
        assert_eq!(
            d["multipart_bytes_uploaded_total"], 0,
            "a loser uploaded bytes: {d}"
        );
        // A loser that started after the winner recorded the scene on the job row answers
        // already_done from the row, without asking the claim gate.
        let lost = d["claims_lost_total"].as_u64().unwrap_or(0);
        assert!(
            lost == 1 || (d["outcome"] == "already_done" && lost == 0),
            "a loser that did not lose a claim: {d}"
        );
    }
    let total: u64 = docs
        .iter()
        .map(|d| d["multipart_bytes_uploaded_total"].as_u64().unwrap())
        .sum();
    assert_eq!(total, size, "bytes uploaded by all assemblers together");
    let scene = match objects {
        None => scene_path(data, &job),
        Some(url) => {
            let rt = tokio::runtime::Runtime::new().unwrap();
            let store = rt.block_on(tilegate_backends::open_objects(url)).unwrap();
            let r = rt
                .block_on(store.get_bytes(&tilegate_tests::object_key(format!(
                    "tilegate/scenes/{job}.tif"
                ))))
                .unwrap();
            assert_eq!(r.meta.size, size);
            let local = data.join("downloaded-scene.tif");
            std::fs::write(&local, &r.bytes).unwrap();
            local
        }
    };
    assert_scene_matches_source(&scene, &src);
    let again = json(&["assemble", &job]);
    assert_eq!(again["outcome"], "already_done");
    assert_eq!(again["scene_etag"], winners[0]["scene_etag"]);
    let cleanup = json(&["cleanup-uploads", "--older-than-s", "0"]);
    assert_eq!(
        cleanup["aborted"], 0,
        "an incomplete upload was left behind"
    );
}

#[test]
fn lapsed_lease_is_taken_over_and_the_lapsed_upload_aborted() {
    let tmp = tempdir();
    let data = tmp.path();
    let src = data.join("scene.tif");
    sample(data, &src, 2048, 6);
    let run = tg_json(data, &["run", src.to_str().unwrap(), "--no-assemble"]);
    let job = run["job_id"].as_str().unwrap().to_owned();

    // A: a 1.5 s lease whose renewals stop after the first part, 2.5 s between parts.
    let a = spawn_assemble(
        data,
        &[
            &job,
            "--lease-ttl-ms",
            "1500",
            "--test-pause-renewals-after-parts",
            "1",
            "--test-part-delay-ms",
            "2500",
        ],
    );
    // B starts once A's lease has visibly lapsed.
    let db = tilegate_embedded::SqliteBackend::open(data.join("tilegate.db")).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let resource = format!("tilegate/scenes/{job}.tif");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        use tilegate_core::table::ClaimTable;
        let claim = rt.block_on(db.get_claim(&resource)).unwrap();
        if claim.is_some_and(|c| c.row.expires_at < now_millis()) {
            break;
        }
        assert!(Instant::now() < deadline, "A never let its lease lapse");
        std::thread::sleep(Duration::from_millis(50));
    }
    let b = finish(spawn_assemble(data, &[&job]));
    let a = finish(a);
    assert_eq!(b["outcome"], "written", "{b}");
    assert_eq!(a["outcome"], "lease_lost", "{a}");
    assert!(a["multipart_bytes_uploaded_total"].as_u64().unwrap() > 0);
    let scene = scene_path(data, &job);
    assert_scene_matches_source(&scene, &src);
    let status = tg_json(data, &["status", &job]);
    assert_eq!(status["scene_output"]["e_tag"], b["scene_etag"]);
    let cleanup = tg_json(data, &["cleanup-uploads", "--older-than-s", "0"]);
    assert_eq!(
        cleanup["aborted"], 0,
        "the lapsed holder's upload was not aborted"
    );
}

#[test]
fn short_manifest_is_refused_and_stray_objects_change_nothing() {
    let tmp = tempdir();
    let data = tmp.path();
    let src = data.join("scene.tif");
    sample(data, &src, 1024, 8);
    let plan = tg_json(data, &["plan", src.to_str().unwrap()]);
    let job = plan["job_id"].as_str().unwrap().to_owned();
    // Three windows complete; the fourth worker dies between its tile and its row.
    let killed = work_until_fault(data, "after-commit", 3);
    assert!(!killed.status.success());
    // A stray object from some older pipeline, right among the tiles.
    let tiles = tilegate_tests::tiles_dir(data, &job);
    let any_tile = std::fs::read_dir(&tiles)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::copy(&any_tile, tiles.join("0009_0009.tif")).unwrap();

    let out = tg(data, &["--json", "assemble", &job], &[]);
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["outcome"], "incomplete");
    assert_eq!(doc["manifest_rows"], 3);
    assert_eq!(doc["missing"].as_array().unwrap().len(), 1);
    let missing = doc["missing"][0].as_str().unwrap().to_owned();
    assert!(String::from_utf8_lossy(&out.stderr).contains(&missing));
    assert!(!scene_path(data, &job).exists());

    // A backfill of the missing windows only: the killed worker's message is still on the
    // queue (in flight until its visibility lapses), so nothing is sent twice.
    let backfill = tg_json(data, &["backfill", &job, "--missing"]);
    assert_eq!(backfill["enqueued"], 0, "{backfill}");
    assert_eq!(backfill["still_queued"], 1, "{backfill}");
    assert_eq!(backfill["already_recorded"], 3);
    tg_json(data, &["work", "--until-empty"]);
    let done = tg_json(data, &["assemble", &job]);
    assert_eq!(done["outcome"], "written");
    assert_scene_matches_source(&scene_path(data, &job), &src);
}

#[test]
fn repair_is_superseded_when_the_tile_changed_after_it_was_read() {
    let tmp = tempdir();
    let data = tmp.path();
    let src = data.join("scene.tif");
    sample(data, &src, 1024, 9);
    let run = tg_json(data, &["run", src.to_str().unwrap(), "--no-assemble"]);
    let job = JobId::parse(run["job_id"].as_str().unwrap()).unwrap();
    let b = tilegate_embedded::open_data_dir(data, 3).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let w = Window::new(1, 0);

    // Something rewrites the tile between the repair's read and its write.
    let prepared = rt
        .block_on(repair::prepare(&b, &Default::default(), &job, w))
        .unwrap();
    let key = prepared.key.clone();
    let other = rt
        .block_on(
            b.objects
                .get_bytes(&prepared.job.prefix.tile_key(&job, Window::new(0, 0))),
        )
        .unwrap();
    rt.block_on(
        b.objects
            .put_opts(&key, other.bytes.clone(), PutOptions::default()),
    )
    .unwrap();
    let newer = rt.block_on(b.objects.head(&key)).unwrap().unwrap();
    assert_eq!(
        rt.block_on(repair::commit(&b, prepared)).unwrap(),
        RepairOutcome::Superseded
    );
    assert_eq!(
        rt.block_on(b.objects.head(&key)).unwrap().unwrap(),
        newer,
        "repair clobbered a newer tile"
    );

    // Unchanged since read: written, and the manifest row follows under its version guard.
    let out = tg_json(data, &["repair", job.as_str(), "--window", "1_0"]);
    assert_eq!(out["outcome"], "written");
    let row = rt.block_on(b.manifest.get_entry(&job, w)).unwrap().unwrap();
    assert_eq!(row.row.origin, TileOrigin::Repaired);
    assert_eq!(row.version, 2);
    assert_eq!(row.row.e_tag.as_str(), out["e_tag"].as_str().unwrap());
    let repaired = tilegate_cog::read_raster(
        data.join("objects").join(key.as_str()).to_str().unwrap(),
        None,
        None,
    )
    .unwrap();
    let rect = tilegate_core::Grid::new(1024, 1024, 512)
        .unwrap()
        .rect(w)
        .unwrap();
    let want = tilegate_cog::read_raster(src.to_str().unwrap(), Some(rect), None).unwrap();
    assert!(
        repaired.bytes == want.bytes,
        "the repaired tile is not the source window"
    );
}
