//! End to end on the other clouds' object stores, tables and queue embedded: `tilegate init
//! --create-bucket` creates the bucket or container, `tilegate run SOURCE --objects gs://…`
//! (or `az://…`) writes the same tiles and the same scene bytes as the embedded run, and a
//! rerun writes nothing and changes no object's version (generation / ETag) or LastModified.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;
use tilegate_core::object::{ObjectStore, ObjectStoreExt as _};
use tilegate_tests::object_key;
use tilegate_tests::{sample, tempdir, tg, tg_json};

/// Every object under the store: key → (bytes' hash, ETag, version, LastModified).
type Snapshot = BTreeMap<String, (String, String, Option<String>, SystemTime)>;

async fn snapshot(s: &dyn ObjectStore) -> Snapshot {
    let mut out = BTreeMap::new();
    for m in s.list("").await.expect("list") {
        let bytes = s.get_bytes(&object_key(&m.key)).await.expect("get").bytes;
        out.insert(
            m.key.clone(),
            (
                tilegate_tests::blake3_hex(&bytes),
                m.e_tag.as_str().to_owned(),
                m.version.clone(),
                m.last_modified,
            ),
        );
    }
    out
}

/// The hashes alone, for comparing two stores.
/// The tiles' and the scene's hashes by key. STAC Items are left out: an Item names when its
/// job was planned, and two runs on two backends are two plannings.
fn contents(s: &Snapshot) -> BTreeMap<String, String> {
    s.iter()
        .filter(|(k, _)| !k.ends_with(".json"))
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

fn run(data: &Path, objects: Option<&str>, src: &Path) -> serde_json::Value {
    let mut args = Vec::new();
    if let Some(o) = objects {
        args.extend(["--objects", o]);
    }
    args.extend(["run", src.to_str().unwrap(), "--window", "256"]);
    tg_json(data, &args)
}

fn same_tiles_as_embedded(objects: &str) {
    let tmp = tempdir();
    let src = tmp.path().join("scene.tif");
    sample(tmp.path(), &src, 1024, 5);
    let (local, cloud) = (tmp.path().join("embedded"), tmp.path().join("cloud"));
    let rt = tokio::runtime::Runtime::new().unwrap();

    let init = tg(
        &cloud,
        &["--json", "--objects", objects, "init", "--create-bucket"],
        &[],
    );
    assert!(
        init.status.success(),
        "init: {}",
        String::from_utf8_lossy(&init.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&init.stdout).unwrap();
    assert_eq!(doc["created"].as_array().map(Vec::len), Some(1), "{doc}");
    let again = tg_json(&cloud, &["--objects", objects, "init", "--create-bucket"]);
    assert_eq!(
        again["created"].as_array().map(Vec::len),
        Some(0),
        "{again}"
    );

    let a = run(&local, None, &src);
    let b = run(&cloud, Some(objects), &src);
    assert_eq!(
        a["job_id"], b["job_id"],
        "the output store is not part of the job"
    );
    assert_eq!(b["tiles_written"], 16, "{b}");
    assert_eq!(b["scene"]["outcome"], "written", "{b}");

    let embedded = rt
        .block_on(tilegate_backends::open_objects(&format!(
            "file://{}",
            local.join("objects").display()
        )))
        .unwrap();
    let store = rt
        .block_on(tilegate_backends::open_objects(objects))
        .unwrap();
    let before = rt.block_on(snapshot(&*store));
    let reference = rt.block_on(snapshot(&*embedded));
    assert_eq!(
        before.len(),
        18,
        "16 tiles, the scene and its STAC Item: {:?}",
        before.keys()
    );
    assert_eq!(
        contents(&before),
        contents(&reference),
        "tiles or scene differ"
    );

    let rerun = run(&cloud, Some(objects), &src);
    assert_eq!(rerun["tiles_written"], 0, "{rerun}");
    assert_eq!(rerun["scene"]["outcome"], "already_done", "{rerun}");
    assert_eq!(
        rt.block_on(snapshot(&*store)),
        before,
        "a rerun changed an object's bytes, version or LastModified"
    );
}

#[test]
fn gcs_run_matches_the_embedded_run() {
    let _ = tilegate_tests::gcs_emulator();
    same_tiles_as_embedded(&format!("gs://{}/out", tilegate_tests::unique("tg-e2e")));
}

/// The tiles and scene of a store's job, by name within the job (window file names, the
/// scene's), with their hashes: two jobs of different sources compare equal when their
/// outputs are byte-identical.
async fn outputs(s: &dyn ObjectStore) -> BTreeMap<String, String> {
    snapshot(s)
        .await
        .into_iter()
        .filter(|(k, _)| !k.ends_with(".json"))
        .map(|(k, v)| {
            let name = if k.contains("/scenes/") {
                "scene"
            } else {
                k.rsplit('/').next().unwrap_or(&k)
            };
            (name.to_owned(), v.0)
        })
        .collect()
}

#[test]
fn azure_run_matches_the_embedded_run() {
    let account = tilegate_tests::azure_emulator();
    same_tiles_as_embedded(&format!(
        "az://{}/{}/out",
        account.name,
        tilegate_tests::azure_container()
    ));
}

/// A source uploaded to `bucket` (`gs://b` or `az://account/c`, created here) gives the tiles
/// and scene of the same file read locally: pinned by its generation or ETag, read by GDAL
/// through `/vsigs/` or `/vsiaz/`.
fn a_cloud_source_gives_the_tiles_of_the_local_file(bucket: &str) {
    let tmp = tempdir();
    let src = tmp.path().join("scene.tif");
    sample(tmp.path(), &src, 1024, 5);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let uri = format!("{bucket}/scenes/scene.tif");
    let init = tg(
        &tmp.path().join("init"),
        &["--objects", bucket, "init", "--create-bucket"],
        &[],
    );
    assert!(
        init.status.success(),
        "init: {}",
        String::from_utf8_lossy(&init.stderr)
    );
    rt.block_on(async {
        let s = tilegate_backends::open_objects(bucket).await.unwrap();
        let bytes = bytes::Bytes::from(std::fs::read(&src).unwrap());
        s.put_create(&object_key("scenes/scene.tif"), bytes)
            .await
            .unwrap();
    });
    let (local, remote) = (tmp.path().join("local"), tmp.path().join("remote"));
    let a = run(&local, None, &src);
    let b = tg_json(&remote, &["run", &uri, "--window", "256"]);
    assert_ne!(a["job_id"], b["job_id"], "another source is another job");
    assert_eq!(b["tiles_written"], 16, "{b}");
    let open = |d: &Path| {
        rt.block_on(tilegate_backends::open_objects(&format!(
            "file://{}",
            d.join("objects").display()
        )))
        .unwrap()
    };
    let (x, y) = (open(&local), open(&remote));
    let (x, y) = (rt.block_on(outputs(&*x)), rt.block_on(outputs(&*y)));
    assert_eq!(x.len(), 17);
    assert_eq!(
        x, y,
        "the {uri} source's tiles or scene differ from the local file's"
    );
}

#[test]
fn a_gs_source_gives_the_tiles_of_the_local_file() {
    let _ = tilegate_tests::gcs_emulator();
    a_cloud_source_gives_the_tiles_of_the_local_file(&format!(
        "gs://{}",
        tilegate_tests::unique("tg-src")
    ));
}

#[test]
fn an_az_source_gives_the_tiles_of_the_local_file() {
    let account = tilegate_tests::azure_emulator();
    a_cloud_source_gives_the_tiles_of_the_local_file(&format!(
        "az://{}/{}",
        account.name,
        tilegate_tests::azure_container()
    ));
}
