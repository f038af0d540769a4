//! Products through the binary: overlapping scenes in two UTM zones (nodata holes, cloud
//! masks) planned onto a `utm:` grid with `product plan`, worked and assembled by `work`, each
//! tile's COG compared with a reference made by Debian's GDAL and NumPy
//! (`tests/fixtures/product_pixels.py`: every scene warped with `gdalwarp -r near -et 0` onto
//! the tile, then first-valid in order or `numpy.nan…`); a scene arriving later (`ingest
//! --product`) gives exactly the tiles it touches a new job, and delivering it again changes
//! nothing.

use crate::per_backend::per_backend;
use crate::pipeline::ingest::{Deployment, Flow, flow_under_chaos};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use tilegate_tests::*;

const GRID: &str = "utm:20km@100m";

/// The seven scenes of `product_scenes.py` in `dir`, s1…s7.
fn scenes(dir: &Path) -> Vec<PathBuf> {
    checked(
        Command::new("/usr/bin/python3")
            .arg(fixture("product_scenes.py"))
            .arg(dir),
    );
    (1..=7).map(|i| dir.join(format!("s{i}.tif"))).collect()
}

/// A list file of `scenes` for `--from`.
fn list(dir: &Path, name: &str, scenes: &[PathBuf]) -> PathBuf {
    let path = dir.join(name);
    let text: Vec<String> = scenes.iter().map(|s| s.display().to_string()).collect();
    std::fs::write(&path, text.join("\n")).unwrap();
    path
}

/// `product plan NAME --recipe …` over the scenes listed in `from`.
fn plan(target: &Target, data: &Path, name: &str, recipe: &[&str], from: &Path) -> Value {
    let mut args = vec![
        "product",
        "plan",
        name,
        "--grid",
        GRID,
        "--window",
        "128",
        "--from",
        from.to_str().unwrap(),
        "--recipe",
    ];
    args.extend_from_slice(recipe);
    target.json(data, &args)
}

/// One `ingest --product PRODUCT` round over `inbox`: the one arrival's line.
fn ingest(target: &Target, data: &Path, inbox: &Path, product: &str) -> Value {
    let doc = target.json(
        data,
        &[
            "ingest",
            "--watch",
            inbox.to_str().unwrap(),
            "--settle",
            "0",
            "--poll-s",
            "0.1",
            "--until-idle",
            "--product",
            product,
        ],
    );
    let arrivals = doc["arrivals"].as_array().unwrap();
    assert_eq!(arrivals.len(), 1, "{doc}");
    arrivals[0].clone()
}

fn work(target: &Target, data: &Path, assemble: bool) {
    let mut cmd = target.command(data);
    cmd.args(["work", "--until-empty"]);
    if assemble {
        cmd.arg("--assemble");
    }
    let out = cmd.output().expect("run tilegate");
    assert!(out.status.success(), "{out:?}");
}

/// A copy of the store's object `key` in `data`'s directory, for GDAL and the test to read.
fn fetched(target: &Target, data: &Path, key: &str) -> PathBuf {
    let dir = data.join("fetched");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(key.replace('/', "_"));
    target.copy_object(data, key, &out);
    out
}

/// Each planned tile's code → its job ID.
fn tile_jobs(plan: &Value) -> BTreeMap<String, String> {
    plan["tiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["tile"].as_str().unwrap().to_owned(),
                t["job_id"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Compare every tile of `jobs` with the reference of `recipe` over `scenes`.
/// The tile pointer of `product`'s `tile`: the job it names and its input count.
fn pointer(target: &Target, data: &Path, product: &str, tile: &str) -> (String, usize) {
    let key = format!("tilegate/products/{product}/tiles/{tile}/current.json");
    let path = fetched(target, data, &key);
    let doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    // The COG it names is in place.
    fetched(target, data, doc["key"].as_str().unwrap());
    (
        doc["job_id"].as_str().unwrap().to_owned(),
        doc["inputs"].as_array().unwrap().len(),
    )
}

/// With `complete`, `jobs` must hold every tile where some scene has a valid pixel.
fn check_pixels(
    target: &Target,
    data: &Path,
    jobs: &BTreeMap<String, String>,
    recipe: &str,
    scenes: &[PathBuf],
    complete: bool,
) -> Value {
    let mut tiles = serde_json::Map::new();
    tiles.insert(
        "grid".into(),
        json!({"size": 20_000, "resolution": 100, "complete": complete}),
    );
    for (code, job) in jobs {
        let mut parts = code.split('-');
        let zone: u32 = parts.next().unwrap().trim_end_matches('N').parse().unwrap();
        let col: f64 = parts.next().unwrap().parse().unwrap();
        let row: f64 = parts.next().unwrap().parse().unwrap();
        let cog = fetched(target, data, &format!("tilegate/scenes/{job}.tif"));
        tiles.insert(
            code.clone(),
            json!({
                "cog": cog,
                "epsg": 32_600 + zone,
                "bounds": [col * 2e4, row * 2e4, (col + 1.0) * 2e4, (row + 1.0) * 2e4],
                "size": 200,
            }),
        );
    }
    let path = data.join(format!("tiles-{}.json", recipe.replace(':', "-")));
    std::fs::write(&path, serde_json::to_vec(&Value::Object(tiles)).unwrap()).unwrap();
    let out = checked(
        Command::new("/usr/bin/python3")
            .arg(fixture("product_pixels.py"))
            .arg(&path)
            .arg(recipe)
            .args(scenes),
    );
    serde_json::from_str(&out).unwrap()
}

#[test]
fn six_scenes_in_two_zones_make_tiles_equal_to_their_references() {
    let target = Target::Embedded;
    let t = &target;
    let dir = tempdir();
    let all = scenes(dir.path());
    let six = &all[..6];
    let from = list(dir.path(), "six.txt", six);
    let data = dir.path().join("data");
    let recipes: [(&str, &[&str]); 5] = [
        ("mosaic:newest", &["mosaic", "--order", "newest"]),
        ("mosaic:least-cloud", &["mosaic", "--order", "least-cloud"]),
        ("composite:median", &["composite", "--stat", "median"]),
        ("composite:p25", &["composite", "--stat", "p25"]),
        ("composite:count", &["composite", "--stat", "count"]),
    ];
    let mut planned = Vec::new();
    for (i, (name, args)) in recipes.iter().enumerate() {
        let p = plan(t, &data, &format!("p{i}"), args, &from);
        assert_eq!(p["scenes"].as_array().unwrap().len(), 6, "{p}");
        planned.push((*name, tile_jobs(&p)));
    }
    // The scenes reach tiles of both zones; each recipe plans the same tiles.
    let tiles: Vec<&String> = planned[0].1.keys().collect();
    assert!(tiles.iter().any(|t| t.starts_with("32N")), "{tiles:?}");
    assert!(tiles.iter().any(|t| t.starts_with("33N")), "{tiles:?}");
    for (_, jobs) in &planned {
        assert_eq!(jobs.keys().collect::<Vec<_>>(), tiles);
    }
    work(t, &data, true);
    for (i, (recipe, jobs)) in planned.iter().enumerate() {
        // Every recipe plans the same tiles: that none is missing is checked once.
        let seen = check_pixels(t, &data, jobs, recipe, six, i == 0);
        assert_eq!(seen["tiles"], tiles.len(), "{recipe}: {seen}");
        assert!(seen["valid_pixels"].as_u64().unwrap() > 100_000, "{seen}");
    }
    // Every tile's pointer names its job.
    for (i, (_, jobs)) in planned.iter().enumerate() {
        for (tile, job) in jobs {
            assert_eq!(&pointer(t, &data, &format!("p{i}"), tile).0, job);
        }
    }
    // Planning the same scenes again plans the same jobs and enqueues nothing.
    let again = plan(t, &data, "p0", recipes[0].1, &from);
    assert_eq!(tile_jobs(&again), planned[0].1);
    for t in again["tiles"].as_array().unwrap() {
        assert_eq!(
            (&t["newly_planned"], &t["enqueued"]),
            (&json!(false), &json!(0))
        );
    }
    // A product's definition is fixed by its first plan.
    let out = t
        .command(&data)
        .args([
            "--json",
            "product",
            "plan",
            "p0",
            "--grid",
            "utm:10km@100m",
            "--recipe",
            "mosaic",
            "--from",
            from.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["reason"], "bad-recipe", "{doc}");
}

per_backend!(a_scene_added_later_gives_exactly_the_tiles_it_touches_a_new_job: [embedded, aws, gcs, azure]);

fn a_scene_added_later_gives_exactly_the_tiles_it_touches_a_new_job(target: Target) {
    let t = &target;
    let dir = tempdir();
    let all = scenes(dir.path());
    let data = dir.path().join("data");
    if let Target::Objects(_) = t {
        t.json(&data, &["init", "--create-bucket"]);
    }
    let recipe: &[&str] = &["mosaic", "--order", "newest"];
    let before = tile_jobs(&plan(
        t,
        &data,
        "m",
        recipe,
        &list(dir.path(), "six.txt", &all[..6]),
    ));
    work(t, &data, true);
    // The seventh scene arrives: `ingest --product` on the inbox it lands in.
    let inbox = dir.path().join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    std::fs::copy(&all[6], inbox.join("s7.tif")).unwrap();
    let added = ingest(t, &data, &inbox, "m");
    assert_eq!(added["outcome"], "planned", "{added}");
    assert_eq!(added["product"], "m", "{added}");
    let after = tile_jobs(&added);
    let touched: Vec<String> = after.keys().cloned().collect();
    // Exactly the tiles its footprint reaches on the grid (the planner's own reckoning, by
    // `product plan` of the same file into a second product).
    let reckoned = plan(
        t,
        &data,
        "m-check",
        recipe,
        &list(dir.path(), "seventh.txt", &all[6..]),
    );
    assert_eq!(
        reckoned["scenes"][0]["tiles"],
        json!(touched),
        "only its tiles planned"
    );
    assert!(
        touched.iter().any(|t| !before.contains_key(t)),
        "{touched:?} reaches a new tile"
    );
    for t in added["tiles"].as_array().unwrap() {
        let code = t["tile"].as_str().unwrap();
        assert_eq!(t["newly_planned"], true, "{t}");
        if let Some(old) = before.get(code) {
            assert_ne!(
                old,
                t["job_id"].as_str().unwrap(),
                "{code}: a new input set, a new job"
            );
        }
    }
    // Delivered again (a restarted `ingest` sees the file anew): nothing new anywhere.
    let again = ingest(t, &data, &inbox, "m");
    assert_eq!(again["outcome"], "duplicate", "{again}");
    assert_eq!(tile_jobs(&again), after);
    for t in again["tiles"].as_array().unwrap() {
        assert_eq!(
            (&t["newly_planned"], &t["enqueued"]),
            (&json!(false), &json!(0))
        );
    }
    work(t, &data, true);
    // Each updated tile's STAC Item is derived from its seven or fewer scenes, and valid.
    for (tile, job) in &after {
        let path = fetched(t, &data, &format!("tilegate/scenes/{job}.json"));
        let item: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(item["properties"]["tilegate:tile"], tile.as_str());
        let derived = item["links"].as_array().unwrap().iter();
        let inputs = derived.filter(|l| l["rel"] == "derived_from").count();
        assert_eq!(inputs, pointer(t, &data, "m", tile).1, "{tile}: {item}");
        validate_stac(&path).unwrap();
    }
    // The pointers moved onto the new jobs; the other tiles' stayed where they were.
    for (tile, job) in &before {
        let want = after.get(tile).unwrap_or(job);
        assert_eq!(&pointer(t, &data, "m", tile).0, want, "{tile}");
    }
    // The updated tiles are the mosaic of all seven scenes.
    let seen = check_pixels(t, &data, &after, "mosaic:newest", &all, false);
    assert_eq!(seen["tiles"], touched.len(), "{seen}");
}

per_backend!(a_pointer_never_goes_back_to_an_older_input_set);

fn a_pointer_never_goes_back_to_an_older_input_set(target: Target) {
    let t = &target;
    let dir = tempdir();
    let all = scenes(dir.path());
    let data = dir.path().join("data");
    let recipe: &[&str] = &["composite", "--stat", "max"];
    let old = tile_jobs(&plan(
        t,
        &data,
        "c",
        recipe,
        &list(dir.path(), "six.txt", &all[..6]),
    ));
    let new = tile_jobs(&plan(
        t,
        &data,
        "c",
        recipe,
        &list(dir.path(), "s7.txt", &all[6..]),
    ));
    work(t, &data, false);
    // The newer input set is assembled first, the older one after it.
    let (tile, newer) = new
        .iter()
        .find(|(t, _)| old.contains_key(*t))
        .expect("the seventh scene reaches a tile of the six");
    let older = &old[tile];
    for job in [newer, older] {
        t.json(&data, &["assemble", job]);
    }
    let (at, inputs) = pointer(t, &data, "c", tile);
    assert_eq!(
        &at, newer,
        "{tile}: the pointer stays on the larger input set"
    );
    // Assembling the newer one again moves nothing.
    t.json(&data, &["assemble", newer]);
    assert_eq!(pointer(t, &data, "c", tile), (at, inputs));
}

/// An arrival for a product nobody defined is refused, named, and plans nothing.
#[test]
fn an_arrival_for_an_undefined_product_is_refused() {
    let t = &Target::Embedded;
    let dir = tempdir();
    let all = scenes(dir.path());
    let data = dir.path().join("data");
    let inbox = dir.path().join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    std::fs::copy(&all[0], inbox.join("s1.tif")).unwrap();
    let out = t
        .command(&data)
        .args(["--json", "ingest", "--watch", inbox.to_str().unwrap()])
        .args(["--settle", "0", "--poll-s", "0.1", "--until-idle"])
        .args(["--product", "nowhere"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let line = &doc["arrivals"][0];
    assert_eq!(line["outcome"], "refused", "{doc}");
    assert_eq!(line["reason"], "bad-recipe", "{doc}");
    let why = line["why"].as_str().unwrap();
    assert!(why.contains("product `nowhere` is not defined"), "{why}");
    assert!(!data.join("objects/tilegate/products").exists());
    assert!(!data.join("objects/tilegate/tiles").exists());
}

/// The venv with cogeo-mosaic and rio-tiler (`bash .ci/mosaic-venv` makes it).
fn mosaic_python() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci-cache/mosaic-venv/bin/python");
    assert!(p.exists(), "{}: run `bash .ci/mosaic-venv`", p.display());
    p
}

/// `product index` writes what others serve a product with: the MosaicJSON validates against
/// cogeo-mosaic's model and a rio-tiler point read through it gives each tile's pixel; each
/// zone's VRT holds its tiles' pixels and validity at their places; the STAC Collection over
/// the tiles' Items passes stac-validator.
#[test]
fn a_product_index_serves_its_tiles_to_cogeo_mosaic_gdal_and_stac() {
    let t = &Target::Embedded;
    let dir = tempdir();
    let all = scenes(dir.path());
    let from = list(dir.path(), "six.txt", &all[..6]);
    let data = dir.path().join("data");
    // A scene without nodata (its mask alone says what is valid): a mosaic with it has no
    // nodata every input shares, so its tiles keep validity in a mask, and so must the VRT.
    let bare = dir.path().join("s1-bare.tif");
    checked(
        Command::new("gdal_translate")
            .args(["-q", "-a_nodata", "none"])
            .arg(&all[0])
            .arg(&bare),
    );
    let mut mixed = vec![bare];
    mixed.extend_from_slice(&all[1..6]);
    let mixed = list(dir.path(), "mixed.txt", &mixed);
    let products: [(&str, &[&str], &Path); 3] = [
        ("m", &["mosaic", "--order", "newest"], &from),
        ("c", &["composite", "--stat", "median"], &from),
        ("k", &["mosaic", "--order", "oldest"], &mixed),
    ];
    let mut planned = Vec::new();
    for (name, recipe, scenes) in products {
        planned.push((name, tile_jobs(&plan(t, &data, name, recipe, scenes))));
    }
    work(t, &data, true);
    let objects = data.join("objects");
    for (name, jobs) in &planned {
        let index = t.json(&data, &["product", "index", name]);
        assert_eq!(index["tiles"], jobs.len(), "{index}");
        let zones: Vec<&str> = index["vrts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["zone"].as_str().unwrap())
            .collect();
        assert_eq!(zones, ["32N", "33N"], "{index}");
        let vrt_tiles: u64 = index["vrts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["tiles"].as_u64().unwrap())
            .sum();
        assert_eq!(vrt_tiles, jobs.len() as u64);
        let mut tiles = serde_json::Map::new();
        for (tile, job) in jobs {
            let cog = objects.join(format!("tilegate/scenes/{job}.tif"));
            let cog = cog.to_str().unwrap().to_owned();
            tiles.insert(tile.clone(), json!({ "cog": cog, "asset": cog }));
        }
        let tiles_path = dir.path().join(format!("index-tiles-{name}.json"));
        std::fs::write(&tiles_path, serde_json::to_vec(&tiles).unwrap()).unwrap();
        let at = |key: &Value| objects.join(key.as_str().unwrap());
        // Product `k`'s tiles that the bare scene reaches keep validity in a mask, the others
        // in nodata: so do the VRTs.
        let masked = index["vrts"].as_array().unwrap().iter().filter(|v| {
            let text = std::fs::read_to_string(at(&v["key"])).unwrap();
            text.contains("<MaskBand>")
        });
        assert_eq!(masked.count() > 0, *name == "k", "{name}: {index}");
        let mut check = Command::new(mosaic_python());
        check
            .arg(fixture("product_index_check.py"))
            .arg(at(&index["mosaicjson"]))
            .arg(&tiles_path);
        for v in index["vrts"].as_array().unwrap() {
            check.arg(at(&v["key"]));
        }
        let seen: Value = serde_json::from_str(&checked(&mut check)).unwrap();
        // A tile the scenes' outlines reach may hold no valid pixel (planning is conservative).
        let empty = seen["empty"].as_u64().unwrap();
        assert!(empty <= 2, "{name}: {seen}");
        assert_eq!(
            seen["points"].as_u64().unwrap() + empty,
            jobs.len() as u64,
            "{name}: {seen}"
        );
        assert_eq!(seen["vrt_tiles"], jobs.len(), "{name}: {seen}");
        assert!(
            seen["vrt_valid_pixels"].as_u64().unwrap() > 100_000,
            "{seen}"
        );
        // The Collection links every tile's Item, and is valid STAC.
        let collection = at(&index["collection"]);
        let doc: Value = serde_json::from_slice(&std::fs::read(&collection).unwrap()).unwrap();
        let items = doc["links"].as_array().unwrap().iter();
        let items: Vec<&Value> = items.filter(|l| l["rel"] == "item").collect();
        assert_eq!(items.len(), jobs.len(), "{doc}");
        for link in items {
            let item = collection
                .parent()
                .unwrap()
                .join(link["href"].as_str().unwrap());
            assert!(item.exists(), "{}", item.display());
        }
        validate_stac(&collection).unwrap();
    }
    // A pointer planted in the bucket, naming another key, is not believed: named, refused.
    let (tile, _) = planned[0].1.iter().next().unwrap();
    let pointer = objects.join(format!("tilegate/products/m/tiles/{tile}/current.json"));
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&pointer).unwrap()).unwrap();
    doc["key"] = json!("elsewhere/secret.tif");
    std::fs::write(&pointer, serde_json::to_vec(&doc).unwrap()).unwrap();
    let out = t
        .command(&data)
        .args(["--json", "product", "index", "m"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["reason"], "bad-recipe", "{doc}");
    let message = doc["error"]["message"].as_str().unwrap();
    assert!(message.contains(tile.as_str()), "{doc}");
}

/// A product fed by arrivals under the unattended flow's chaos (`ingest --product` twice,
/// one killed and restarted; three pools armed at crash points, two killed from outside; the
/// reconciler beside them): `landed` scenes land at once, and every tile's pointer ends on
/// the set of all the scenes that touch it. Every tile version (each job of the product) is
/// assembled from its windows, each written once; the final tiles equal the reference mosaic.
/// (Four scenes on the AWS emulator, whose one Python process every GDAL read of every
/// version of every tile goes through: seven take it near the harness's 300 s.)
fn product_under_chaos(flow: &Flow, tmp: &Path, landed: usize) {
    let dir = tmp.join("scenes");
    std::fs::create_dir_all(&dir).unwrap();
    let mut all = scenes(&dir);
    all.truncate(landed);
    let recipe: &[&str] = &["mosaic", "--order", "newest"];
    // What each tile will hold, as planning reckons it: the same files planned into a product
    // of a data directory of its own.
    let reckoned = plan(
        &Target::Embedded,
        &tmp.join("reckon"),
        "r",
        recipe,
        &list(&dir, "all.txt", &all),
    );
    let expected: BTreeMap<String, usize> = reckoned["tiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let n = t["inputs"].as_u64().unwrap() as usize;
            (t["tile"].as_str().unwrap().to_owned(), n)
        })
        .collect();
    // The product is defined before anything arrives.
    let out = flow
        .command(&["product", "plan", "p", "--grid", GRID, "--window", "128"])
        .args(["--recipe", "mosaic", "--order", "newest"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let b = rt.block_on(flow.target().backends(flow.data()));
    let pointer = |tile: &str| -> Option<Value> {
        use tilegate_core::object::ObjectStoreExt as _;
        let key = format!("tilegate/products/p/tiles/{tile}/current.json");
        let got = rt.block_on(b.objects.get_bytes(&object_key(&key)));
        got.ok().map(|g| serde_json::from_slice(&g.bytes).unwrap())
    };
    let landing: Vec<(&Path, String)> = all
        .iter()
        .enumerate()
        .map(|(i, s)| (s.as_path(), format!("s{}.tif", i + 1)))
        .collect();
    let ingest = || {
        let mut cmd = flow.ingest();
        cmd.args(["--product", "p"]);
        cmd
    };
    // Every job of the product: each version of each tile.
    let product_jobs = || -> Vec<tilegate_core::table::JobRecord> {
        let listed = rt.block_on(b.jobs.list_jobs(100_000)).unwrap();
        listed
            .into_iter()
            .map(|v| v.row)
            .filter(|j| {
                matches!(&j.recipe.operation,
                tilegate_core::recipe::Operation::Product(p) if p.product == "p")
            })
            .collect()
    };
    // Done when every tile's pointer names the set of all its scenes and every version planned
    // on the way is published too (a pointer moves before its job's row records the scene:
    // a pool killed between leaves the row to the reconciler).
    // Asked every 3 s: each asking reads every pointer and the jobs table.
    let mut asked: Option<std::time::Instant> = None;
    let run = flow_under_chaos(flow, &ingest, &landing, &mut |_| {
        if asked.is_some_and(|t| t.elapsed() < std::time::Duration::from_secs(3)) {
            return false;
        }
        asked = Some(std::time::Instant::now());
        expected.iter().all(|(tile, n)| {
            pointer(tile).is_some_and(|p| p["inputs"].as_array().unwrap().len() == *n)
        }) && product_jobs().iter().all(|j| j.scene_output.is_some())
    });
    let seed = run.seed;
    // Every version of every tile: assembled from its windows, each written once.
    let jobs: Vec<String> = product_jobs()
        .iter()
        .map(|j| j.job_id.to_string())
        .collect();
    assert!(jobs.len() >= expected.len(), "seed {seed}: {jobs:?}");
    println!(
        "chaos[product] seed {seed}: {} scenes, {} tiles, {} tile versions",
        all.len(),
        expected.len(),
        jobs.len()
    );
    for job in &jobs {
        let st = flow.status(job);
        let windows = st["windows"].as_u64().unwrap();
        assert_eq!(st["lifecycle"], "published", "seed {seed}: {st}");
        assert_eq!(st["manifest_rows"], windows, "seed {seed}: {st}");
        assert_eq!(st["queue"]["dead"], 0, "seed {seed}: {st}");
        assert_eq!(flow.tiles(job) as u64, windows, "seed {seed}: job {job}");
        assert!(
            st["counters"]["tiles_written_total"].as_u64().unwrap_or(0) <= windows,
            "seed {seed}: more creates than windows: {st}"
        );
    }
    // The pointers end on the newest input set, and those tiles are the mosaic of them all.
    let mut finals = BTreeMap::new();
    for (tile, n) in &expected {
        let p = pointer(tile).unwrap();
        assert_eq!(
            p["inputs"].as_array().unwrap().len(),
            *n,
            "seed {seed}: {p}"
        );
        finals.insert(tile.clone(), p["job_id"].as_str().unwrap().to_owned());
    }
    let seen = check_pixels(
        &flow.target(),
        flow.data(),
        &finals,
        "mosaic:newest",
        &all,
        true,
    );
    assert_eq!(seen["tiles"], expected.len(), "seed {seed}: {seen}");
    drop(run);
}

#[test]
fn a_product_fed_by_arrivals_survives_chaos_embedded() {
    let tmp = tempdir();
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    let flow = Flow::Embedded {
        data: tmp.path().join("data"),
        inbox,
    };
    product_under_chaos(&flow, tmp.path(), 7);
}

#[test]
fn a_product_fed_by_arrivals_survives_chaos_aws() {
    let Some(aws) = Aws::for_test("a_product_fed_by_arrivals_survives_chaos_aws") else {
        return;
    };
    let tmp = tempdir();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let d = Deployment::new(aws, &data);
    product_under_chaos(&Flow::Aws(Box::new(d), data), tmp.path(), 4);
}
