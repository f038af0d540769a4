//! The pipeline on AWS (S3, DynamoDB, SQS) through the binary, against the local emulator that
//! the README's test command starts: duplicates across worker processes, dead letters after
//! three unacknowledged receives and their redrive, and the same tiles as the embedded backend.
//!
//! S3 and DynamoDB are served by a single-threaded moto (its threaded server is not atomic under
//! concurrent conditional writes), SQS by a threaded one (long polls would block the other).

use std::process::{Command, Stdio};
use tilegate_core::JobId;
use tilegate_core::object::ObjectStore;
use tilegate_core::table::ManifestTable;
use tilegate_tests::object_key;
use tilegate_tests::{Aws, sample, tempdir, tg, tilegate_bin};

#[test]
fn heavy_aws_duplicates_across_four_processes_write_each_tile_once() {
    let Some(aws) =
        Aws::for_test("heavy_aws_duplicates_across_four_processes_write_each_tile_once")
    else {
        return;
    };
    let tmp = tempdir();
    let data = tmp.path();
    let init = aws.json(data, &["init", "--create-bucket"]);
    assert!(init["created"].as_array().unwrap().len() >= 5, "{init}");
    let scene = data.join("scene-10240.tif");
    sample(data, &scene, 10240, 7);
    let mut job = String::new();
    for _ in 0..3 {
        let p = aws.json(data, &["plan", scene.to_str().unwrap()]);
        assert_eq!(p["enqueued"], 400);
        job = p["job_id"].as_str().unwrap().to_owned();
    }
    let workers: Vec<_> = (0..4)
        .map(|i| {
            let mut cmd = Command::new(tilegate_bin());
            cmd.args(aws.args(data))
                .args(["--json", "work", "--until-empty", "--threads", "1"]);
            if i % 2 == 1 {
                cmd.arg("--no-skip-existing");
            }
            cmd.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for w in workers {
        let out = w.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let status = aws.json(data, &["status", &job]);
    assert_eq!(
        status["manifest_rows"], 400,
        "Select=COUNT over the manifest"
    );
    assert_eq!(status["queue"]["dead"], 0);
    let c = &status["counters"];
    let refused = c["conditional_write_precondition_failed_total"]
        .as_u64()
        .unwrap();
    let skipped = c["duplicate_encodes_skipped_total"].as_u64().unwrap();
    assert!(refused > 0, "S3 never refused a copy: the gate is untested");
    assert!(
        refused + skipped >= 800,
        "refused {refused} + skipped {skipped}"
    );
    assert_eq!(c["tiles_written_total"], 400);

    let first = aws.tiles(&job);
    assert_eq!(first.len(), 400);
    // Each tile's ETag is its manifest row's (written by the first writer or read back by HEAD).
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tables = rt
        .block_on(tilegate_aws::DynamoTables::connect(&aws.tables))
        .unwrap();
    let rows = rt
        .block_on(tables.list_entries(&JobId::parse(&job).unwrap()))
        .unwrap();
    assert_eq!(rows.len(), 400);
    for r in &rows {
        let key = format!("out/{}", r.row.key);
        let (etag, _) = first
            .get(&r.row.key)
            .or_else(|| first.get(&key))
            .unwrap_or_else(|| panic!("no object for row {}", r.row.key));
        assert_eq!(etag, &r.row.e_tag, "{}", r.row.key);
    }

    // A second storm of duplicates that all encode: every Create refused, nothing changes.
    // SQS delivers at least once, so a message may come twice; each delivery is refused.
    aws.json(data, &["plan", scene.to_str().unwrap(), "--all-windows"]);
    let w = aws.json(data, &["work", "--until-empty", "--no-skip-existing"]);
    let handled = w["handled"].as_u64().unwrap();
    assert!(handled >= 400, "{w}");
    assert_eq!(w["already_present"], handled, "{w}");
    assert_eq!(w["written"], 0);
    assert_eq!(aws.tiles(&job), first, "a refused Create changed an object");
}

#[test]
fn aws_message_received_three_times_is_dead_lettered_and_redrive_completes_it() {
    let Some(aws) =
        Aws::for_test("aws_message_received_three_times_is_dead_lettered_and_redrive_completes_it")
    else {
        return;
    };
    let tmp = tempdir();
    let data = tmp.path();
    aws.json(data, &["init", "--create-bucket"]);
    let scene = data.join("scene.tif");
    sample(data, &scene, 512, 2);
    let p = aws.json(data, &["plan", scene.to_str().unwrap()]);
    assert_eq!(p["windows"], 1);
    let job = p["job_id"].as_str().unwrap().to_owned();
    // Three receives, each by a worker that dies before finishing.
    for attempt in 1..=3 {
        let out = aws.run(
            data,
            &["work", "--until-empty", "--visibility", "1"],
            &[("TILEGATE_FAULT", "before-encode")],
        );
        assert!(
            !out.status.success(),
            "attempt {attempt}: the fault did not fire"
        );
    }
    // The next receive finds the message over its receive limit: SQS moves it to the DLQ.
    let w = aws.json(data, &["work", "--until-empty", "--visibility", "1"]);
    assert_eq!(w["handled"], 0, "{w}");
    let dlq = aws.json(data, &["dlq", "list"]);
    assert_eq!(dlq["count"], 1, "{dlq}");
    let status = aws.json(data, &["status", &job]);
    assert_eq!(status["manifest_rows"], 0);

    let r = aws.json(data, &["dlq", "redrive"]);
    assert_eq!(r["redriven"], 1);
    let w = aws.json(data, &["work", "--until-empty"]);
    assert_eq!(w["written"], 1, "{w}");
    let status = aws.json(data, &["status", &job]);
    assert_eq!(status["manifest_rows"], 1);
    assert_eq!(status["queue"]["dead"], 0);
    assert_eq!(aws.json(data, &["dlq", "list"])["count"], 0);
}

/// `tilegate run s3://…/scene.tif` on AWS gives the same tiles (names, bytes — so pixels,
/// geotransform and CRS) as the embedded backend gives for the same content on a local disk,
/// and a rerun writes nothing.
#[test]
fn aws_run_of_an_s3_source_matches_the_embedded_run() {
    let Some(aws) = Aws::for_test("aws_run_of_an_s3_source_matches_the_embedded_run") else {
        return;
    };
    let tmp = tempdir();
    let data = tmp.path();
    aws.json(data, &["init", "--create-bucket"]);
    let scene = data.join("scene.tif");
    sample(data, &scene, 1300, 4);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let bucket_root = aws.objects.trim_end_matches("/out").to_owned();
    let root = rt
        .block_on(tilegate_aws::S3Store::connect(&bucket_root))
        .unwrap();
    {
        use tilegate_core::object::ObjectStoreExt;
        let bytes = bytes::Bytes::from(std::fs::read(&scene).unwrap());
        rt.block_on(root.put_create(&object_key("sources/scene.tif"), bytes))
            .unwrap();
    }
    let source = format!("{bucket_root}/sources/scene.tif");
    // The manifest spread over four DynamoDB partitions: the rerun below (without the flag)
    // reads the count from the job row, and the assembler counts across the shards.
    let on_aws = aws.json(data, &["run", &source, "--manifest-shards", "4"]);
    assert_eq!(on_aws["complete"], true, "{on_aws}");
    assert_eq!(on_aws["tiles_written"], 9);
    assert_eq!(on_aws["scene"]["outcome"], "written");
    let status = aws.json(data, &["status", on_aws["job_id"].as_str().unwrap()]);
    assert_eq!(status["source"], source.as_str());

    let local = tempdir();
    let out = tg(
        local.path(),
        &["--json", "run", scene.to_str().unwrap()],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let on_local: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let remote = aws.tiles(on_aws["job_id"].as_str().unwrap());
    let local_dir = tilegate_tests::tiles_dir(local.path(), on_local["job_id"].as_str().unwrap());
    let mut local_names: Vec<String> = std::fs::read_dir(&local_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    local_names.sort();
    let remote_names: Vec<String> = remote
        .keys()
        .map(|k| k.rsplit('/').next().unwrap().to_owned())
        .collect();
    assert_eq!(remote_names, local_names);
    let store = rt
        .block_on(tilegate_aws::S3Store::connect(&aws.objects))
        .unwrap();
    for key in remote.keys() {
        use tilegate_core::object::ObjectStoreExt;
        let name = key.rsplit('/').next().unwrap();
        let got = rt.block_on(store.get_bytes(&object_key(key))).unwrap();
        let want = std::fs::read(local_dir.join(name)).unwrap();
        assert!(got.bytes == want, "{key} differs between backends");
    }
    let again = aws.json(data, &["run", &source]);
    assert_eq!(again["tiles_written"], 0);
    assert_eq!(again["already_present"], 9);
    assert_eq!(
        aws.tiles(on_aws["job_id"].as_str().unwrap()),
        remote,
        "a rerun changed a tile"
    );
}

/// Eight assemblers at once against S3 + DynamoDB: one claim winner uploads (multipart), the
/// others upload nothing, and no incomplete upload is left behind.
#[test]
fn aws_eight_racing_assemblers_upload_the_scene_once() {
    let Some(aws) = Aws::for_test("aws_eight_racing_assemblers_upload_the_scene_once") else {
        return;
    };
    let tmp = tempdir();
    let data = tmp.path();
    aws.json(data, &["init", "--create-bucket"]);
    let scene = data.join("scene.tif");
    sample(data, &scene, 2048, 5);
    let run = aws.json(data, &["run", scene.to_str().unwrap(), "--no-assemble"]);
    let job = run["job_id"].as_str().unwrap().to_owned();
    let children: Vec<_> = (0..8)
        .map(|_| {
            Command::new(tilegate_bin())
                .args(aws.args(data))
                .args([
                    "--json",
                    "assemble",
                    &job,
                    "--multipart-threshold",
                    "1048576",
                    "--part-size",
                    "5242880",
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let docs: Vec<serde_json::Value> = children
        .into_iter()
        .map(|c| tilegate_tests::assembler_doc(&c.wait_with_output().unwrap()))
        .collect();
    let winners: Vec<_> = docs.iter().filter(|d| d["outcome"] == "written").collect();
    assert_eq!(winners.len(), 1, "{docs:#?}");
    let size = winners[0]["scene_size"].as_u64().unwrap();
    assert_eq!(winners[0]["multipart"], true);
    let total: u64 = docs
        .iter()
        .map(|d| d["multipart_bytes_uploaded_total"].as_u64().unwrap())
        .sum();
    assert_eq!(total, size, "losers uploaded bytes");
    for d in docs.iter().filter(|d| d["outcome"] != "written") {
        assert!(
            d["outcome"] == "held_by" || d["outcome"] == "already_done",
            "{d}"
        );
    }
    let cleanup = aws.json(data, &["cleanup-uploads", "--older-than-s", "0"]);
    assert_eq!(
        cleanup["aborted"], 0,
        "an incomplete multipart upload was left"
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = rt
        .block_on(tilegate_aws::S3Store::connect(&aws.objects))
        .unwrap();
    let meta = rt
        .block_on(store.head(&object_key(format!("tilegate/scenes/{job}.tif"))))
        .unwrap()
        .expect("scene object");
    assert_eq!(meta.size, size);
    assert_eq!(
        meta.e_tag.as_str(),
        winners[0]["scene_etag"].as_str().unwrap()
    );
}
