//! The bad-input catalogue: every kind of bad input DESIGN.md §6 names, each with the named
//! reason it must end in, its fate — dead-lettered by a worker with that reason, refused by the
//! queue at send (a message over the size limit), or refused by the command line with a
//! non-zero exit and one line `tilegate: error[<reason>]: …` — and a
//! check that nothing stored was overwritten (every object file's inode, mtime and content
//! hash are unchanged, and no scene appears).

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Output;
use tilegate_core::message::WindowMessage;
use tilegate_core::queue::MAX_MESSAGE_BYTES;
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, ETag, JobId, Recipe, SourceInfo, Window};
use tilegate_tests::object_key;
use tilegate_tests::{sample, snapshot_tree, tempdir, tg, tg_json};

/// What a bad input is.
enum Input {
    /// A message body sent to the queue as it is.
    Message(String),
    /// Plan this file (after `setup` ran), then let a worker take the planned windows.
    Planned {
        file: &'static str,
        setup: fn(&Path),
    },
    /// A command line.
    Command(Vec<String>),
    /// `assemble` of a job that `setup` prepared (it returns the job ID).
    Assemble(fn(&Path, &Backends) -> String),
}

struct Case {
    name: &'static str,
    input: Input,
    /// The reason it must be named by.
    reason: &'static str,
}

/// The main job's window (0, 0) message as JSON, for mutation.
fn message(job: &JobRecord) -> Value {
    let m = WindowMessage::new(
        job.job_id.clone(),
        job.source.clone(),
        job.recipe.clone(),
        job.grid,
        job.prefix.clone(),
        Window::new(0, 0),
    );
    serde_json::from_str(&m.encode()).unwrap()
}

fn edit(job: &JobRecord, f: impl FnOnce(&mut Value)) -> Input {
    let mut v = message(job);
    f(&mut v);
    Input::Message(v.to_string())
}

fn cli(args: &[&str]) -> Input {
    Input::Command(args.iter().map(|s| (*s).to_owned()).collect())
}

fn catalogue(job: &JobRecord, dir: &Path) -> Vec<Case> {
    let mut cases = message_cases(job);
    cases.extend(planned_cases());
    cases.extend(plan_command_cases(dir));
    cases.extend(assembly_cases());
    cases
}

fn case(name: &'static str, input: Input, reason: &'static str) -> Case {
    Case {
        name,
        input,
        reason,
    }
}

/// A message for a job that was never planned here, with an ID consistent with its source and
/// recipe.
fn ghost_message(job: &JobRecord) -> String {
    let source = SourceInfo {
        uri: "file:///nowhere/ghost.tif".into(),
        etag: ETag::new("\"ghost\""),
        size: 1,
        stat: None,
        assets: Vec::new(),
        signed: false,
    };
    let recipe = Recipe {
        window: job.recipe.window,
        ..Recipe::copy_all()
    };
    let id = JobId::of(&source, &recipe, &job.prefix, &job.tenant);
    WindowMessage::new(
        id,
        source,
        recipe,
        job.grid,
        job.prefix.clone(),
        Window::new(0, 0),
    )
    .encode()
}

/// Messages a worker receives: malformed, forged, unsafe or out of bounds.
fn message_cases(job: &JobRecord) -> Vec<Case> {
    let ghost = ghost_message(job);
    vec![
        case(
            "invalid json",
            Input::Message("{not json".into()),
            "malformed-message",
        ),
        case(
            "empty body",
            Input::Message(String::new()),
            "malformed-message",
        ),
        case(
            "json that is not an object",
            Input::Message("[1,2,3]".into()),
            "malformed-message",
        ),
        case(
            "unknown message version",
            edit(job, |v| v["v"] = 2.into()),
            "unknown-message-version",
        ),
        case(
            "missing fields",
            edit(job, |v| {
                v.as_object_mut().unwrap().remove("window");
            }),
            "malformed-message",
        ),
        case(
            "negative window number",
            edit(job, |v| v["window"]["row"] = (-1).into()),
            "malformed-message",
        ),
        case(
            "overflowing window number",
            edit(job, |v| v["window"]["col"] = json!(1u64 << 32)),
            "malformed-message",
        ),
        case(
            "window outside the scene",
            edit(job, |v| v["window"]["row"] = 99.into()),
            "window-outside-scene",
        ),
        case("unknown job", Input::Message(ghost), "unknown-job"),
        case(
            "job id that does not match its source and recipe",
            edit(job, |v| v["source"]["etag"] = "\"forged\"".into()),
            "job-id-mismatch",
        ),
        case(
            "unsafe key segment `..`",
            edit(job, |v| v["prefix"] = "tilegate/../../etc".into()),
            "unsafe-key-segment",
        ),
        case(
            "unsafe key segment `/`",
            edit(job, |v| v["prefix"] = "/etc".into()),
            "unsafe-key-segment",
        ),
        case(
            "unsafe key segment with NUL",
            edit(job, |v| v["prefix"] = "tile\u{0}gate".into()),
            "unsafe-key-segment",
        ),
        case(
            "unsafe key segment, non-ASCII",
            edit(job, |v| v["prefix"] = "tïlegate".into()),
            "unsafe-key-segment",
        ),
        case(
            "unsafe key segment, 1 KiB long",
            edit(job, |v| v["prefix"] = "a".repeat(1024).into()),
            "unsafe-key-segment",
        ),
        // The prefix is part of the job's identity: a message redirected elsewhere no longer
        // derives its own job ID.
        case(
            "a valid prefix that is not the job's",
            edit(job, |v| v["prefix"] = "elsewhere".into()),
            "job-id-mismatch",
        ),
        // The grid is not (it follows from the source): the job row is the check.
        case(
            "a valid grid that is not the job's",
            edit(job, |v| {
                let w = v["grid"]["width"].as_u64().unwrap();
                v["grid"]["width"] = (w - 16).into();
            }),
            "message-disagrees-with-job",
        ),
        case(
            "unknown recipe in a message",
            edit(job, |v| v["recipe"]["operation"] = json!({"op": "blur"})),
            "malformed-message",
        ),
        case(
            "zero-sized scene in a message",
            edit(job, |v| v["grid"]["width"] = 0.into()),
            "malformed-message",
        ),
        case(
            "oversized message",
            edit(job, |v| v["padding"] = "x".repeat(MAX_MESSAGE_BYTES).into()),
            "message-too-large",
        ),
    ]
}

/// Sources that went wrong between planning and the worker's read.
fn planned_cases() -> Vec<Case> {
    vec![
        case(
            "source missing",
            Input::Planned {
                file: "gone.tif",
                setup: |f| std::fs::remove_file(f).unwrap(),
            },
            "source-missing",
        ),
        case(
            "source changed after planning",
            Input::Planned {
                file: "changed.tif",
                setup: |f| {
                    let data = f.parent().unwrap().join("data");
                    sample(&data, f, 256, 99);
                },
            },
            "source-changed",
        ),
        case(
            "truncated raster (header intact, blocks cut off)",
            Input::Planned {
                file: "truncated.tif",
                setup: |_| {},
            },
            "corrupt-raster",
        ),
    ]
}

/// Bad input to `tilegate plan`.
fn plan_command_cases(dir: &Path) -> Vec<Case> {
    let scene = dir.join("scene.tif").to_str().unwrap().to_owned();
    let file = |name: &str| dir.join(name).to_str().unwrap().to_owned();
    vec![
        case(
            "corrupt raster at plan",
            cli(&["plan", &file("garbage.tif")]),
            "corrupt-raster",
        ),
        case(
            "zero-sized raster at plan",
            cli(&["plan", &file("empty.vrt")]),
            "zero-sized-raster",
        ),
        case(
            "unsupported data type at plan",
            cli(&["plan", &file("complex.tif")]),
            "unsupported-dtype",
        ),
        case(
            "missing source at plan",
            cli(&["plan", &file("absent.tif")]),
            "source-missing",
        ),
        case(
            "unknown recipe at plan",
            cli(&["plan", &scene, "--recipe", "blur"]),
            "bad-recipe",
        ),
        case(
            "ndvi with a band the scene lacks",
            cli(&[
                "plan", &scene, "--recipe", "ndvi", "--red", "9", "--nir", "1",
            ]),
            "bad-recipe",
        ),
        case(
            "unsafe --prefix at plan",
            cli(&["plan", &scene, "--prefix", "../x"]),
            "unsafe-key-segment",
        ),
        case(
            "window not a multiple of 16",
            cli(&["plan", &scene, "--window", "100"]),
            "bad-window",
        ),
    ]
}

/// Tiles and manifest rows the assembler must refuse.
fn assembly_cases() -> Vec<Case> {
    vec![
        case(
            "tile object that is not a TIFF at assembly",
            Input::Assemble(|dir, b| {
                // Something else put bytes at the tile's key before any worker ran; the worker
                // finds them present and records them, and the assembler refuses them.
                let f = dir.join("squatted.tif");
                sample(&dir.join("data"), &f, 128, 5);
                let p = tg_json(
                    &dir.join("data"),
                    &["plan", f.to_str().unwrap(), "--window", "128"],
                );
                let job = p["job_id"].as_str().unwrap().to_owned();
                let key = format!("tilegate/tiles/{job}/0000_0000.tif");
                block_on(b.objects.put_opts(
                    &object_key(&key),
                    bytes::Bytes::from_static(b"definitely not a TIFF"),
                    tilegate_core::object::PutOptions::create(),
                ))
                .unwrap();
                tg_json(&dir.join("data"), &["work", "--until-empty"]);
                job
            }),
            "tile-not-a-tiff",
        ),
        case(
            "manifest row whose byte count disagrees with the object",
            Input::Assemble(|dir, b| {
                let f = dir.join("shrunk.tif");
                sample(&dir.join("data"), &f, 256, 6);
                let r = tg_json(
                    &dir.join("data"),
                    &[
                        "run",
                        f.to_str().unwrap(),
                        "--window",
                        "128",
                        "--no-assemble",
                    ],
                );
                let job = JobId::parse(r["job_id"].as_str().unwrap()).unwrap();
                let row = block_on(b.manifest.get_entry(&job, Window::new(1, 1)))
                    .unwrap()
                    .unwrap();
                let mut e = row.row.clone();
                e.size += 1;
                let out = block_on(b.manifest.update_entry(&e, row.version)).unwrap();
                assert!(matches!(
                    out,
                    tilegate_core::table::UpdateOutcome::Updated { .. }
                ));
                job.to_string()
            }),
            "manifest-size-mismatch",
        ),
    ]
}

fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// The inputs that need files: a garbage file, a zero-sized VRT, a complex-typed raster, a
/// raster cut off after its header.
fn write_bad_files(dir: &Path, data: &Path) {
    std::fs::write(dir.join("garbage.tif"), b"II*\0this is not a raster").unwrap();
    std::fs::write(
        dir.join("empty.vrt"),
        r#"<VRTDataset rasterXSize="0" rasterYSize="10"><VRTRasterBand dataType="Byte" band="1"/></VRTDataset>"#,
    )
    .unwrap();
    let st = std::process::Command::new("gdal_translate")
        .args(["-q", "-ot", "CFloat32"])
        .arg(dir.join("scene.tif"))
        .arg(dir.join("complex.tif"))
        .status()
        .expect("run gdal_translate (gdal-bin)");
    assert!(st.success());
    for name in ["gone.tif", "changed.tif"] {
        sample(data, &dir.join(name), 256, 7);
    }
    let whole = dir.join("whole.tif");
    sample(data, &whole, 256, 8);
    let bytes = std::fs::read(&whole).unwrap();
    std::fs::write(dir.join("truncated.tif"), &bytes[..bytes.len() / 3]).unwrap();
}

fn one_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim_end().to_owned()
}

#[test]
fn bad_input_catalogue() {
    let tmp = tempdir();
    let dir = tmp.path();
    let data = dir.join("data");
    let scene = dir.join("scene.tif");
    sample(&data, &scene, 256, 1);
    let run = tg_json(&data, &["run", scene.to_str().unwrap(), "--window", "128"]);
    assert_eq!(run["tiles_written"], 4);
    assert_eq!(run["scene"]["outcome"], "written");
    write_bad_files(dir, &data);
    let b = tilegate_embedded::open_data_dir(&data, 3).unwrap();
    let job_id = JobId::parse(run["job_id"].as_str().unwrap()).unwrap();
    let job = block_on(b.jobs.get_job(&job_id)).unwrap().unwrap().row;
    let objects = data.join("objects");

    let cases = catalogue(&job, dir);
    assert!(cases.len() >= 20, "the catalogue has {} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let dead_before = block_on(b.queue.list_dead_letters(10_000)).unwrap().len();
        let jobs_before = block_on(b.jobs.list_jobs(10_000)).unwrap().len();
        let mut fail = |what: String| failures.push(format!("{}: {what}", case.name));
        // What the case may not touch: every object stored before it.
        let (before, fate) = match &case.input {
            Input::Message(body) => {
                let before = snapshot_tree(&objects);
                match block_on(b.queue.send_batch(std::slice::from_ref(body))) {
                    Ok(()) => (before, dead_letter_fate(&data, &b, dead_before, 1)),
                    Err(e) => (before, refused_at_send(&e)),
                }
            }
            Input::Planned { file, setup } => {
                let path = dir.join(file);
                let p = tg_json(&data, &["plan", path.to_str().unwrap(), "--window", "256"]);
                assert_eq!(p["windows"], 1, "{}", case.name);
                setup(&path);
                let before = snapshot_tree(&objects);
                (before, dead_letter_fate(&data, &b, dead_before, 1))
            }
            Input::Command(args) => {
                let before = snapshot_tree(&objects);
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let out = tg(&data, &args, &[]);
                let jobs_after = block_on(b.jobs.list_jobs(10_000)).unwrap().len();
                if jobs_after != jobs_before {
                    fail("a refused plan wrote a job row".into());
                }
                (before, refusal_fate(&out))
            }
            Input::Assemble(setup) => {
                let job = setup(dir, &b);
                let scene_key = format!("tilegate/scenes/{job}.tif");
                let before = snapshot_tree(&objects);
                let out = tg(&data, &["assemble", &job], &[]);
                if objects.join(&scene_key).exists() {
                    fail("a refused assembly wrote the scene".into());
                }
                (before, refusal_fate(&out))
            }
        };
        match fate {
            Ok(reason) if reason == case.reason => {}
            Ok(reason) => fail(format!("named `{reason}`, expected `{}`", case.reason)),
            Err(e) => fail(e),
        }
        let after = snapshot_tree(&objects);
        if after != before {
            let changed: Vec<&PathBuf> = after
                .iter()
                .filter(|(p, v)| before.get(*p) != Some(*v))
                .map(|(p, _)| p)
                .chain(before.keys().filter(|p| !after.contains_key(*p)))
                .collect();
            fail(format!("stored objects changed: {changed:?}"));
        }
    }
    println!(
        "bad_input: {} cases, {} failed",
        cases.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "\n  {}", failures.join("\n  "));
    // The good job is untouched by all of it.
    let status = tg_json(&data, &["status", &job_id.to_string()]);
    assert_eq!(status["manifest_rows"], 4);
    assert_eq!(status["counters"]["tiles_written_total"], 4);
}

/// Run a worker over the queue; exactly `n` new dead letters must appear, all with one reason
/// code, and the worker must exit cleanly. Returns the code.
fn dead_letter_fate(data: &Path, b: &Backends, before: usize, n: usize) -> Result<String, String> {
    let w = tg_json(data, &["work", "--until-empty", "--no-skip-existing"]);
    let dead = block_on(b.queue.list_dead_letters(10_000)).unwrap();
    let new: Vec<_> = dead[before..].iter().collect();
    if new.len() != n || w["dead_lettered"] != n as u64 {
        return Err(format!(
            "expected {n} dead letter(s), the worker reports {} and the queue holds {}: {w}",
            w["dead_lettered"],
            new.len()
        ));
    }
    let codes: Vec<&str> = new
        .iter()
        .map(|d| d.reason.split(':').next().unwrap_or_default())
        .collect();
    if codes.windows(2).any(|p| p[0] != p[1]) {
        return Err(format!("mixed reasons: {codes:?}"));
    }
    Ok(codes[0].to_owned())
}

/// The queue itself may refuse a message (as SQS refuses one over its size limit): a
/// permanent, typed error, and nothing is queued.
fn refused_at_send(e: &tilegate_core::StoreError) -> Result<String, String> {
    use std::error::Error as _;
    use tilegate_core::queue::MessageTooLarge;
    match e.source().and_then(|s| s.downcast_ref::<MessageTooLarge>()) {
        Some(MessageTooLarge { .. }) if !e.is_retryable() => Ok("message-too-large".into()),
        _ => Err(format!(
            "the queue refused the message: {}",
            tilegate_core::error::chain(e)
        )),
    }
}

/// The command must fail with one line on stderr, `tilegate: error[<reason>]: …`.
fn refusal_fate(out: &Output) -> Result<String, String> {
    let line = one_line(out);
    if out.status.success() {
        return Err(format!("the command succeeded: {line}"));
    }
    if line.lines().count() != 1 {
        return Err(format!("expected one line on stderr, got: {line}"));
    }
    line.strip_prefix("tilegate: error[")
        .and_then(|r| r.split_once("]: "))
        .map(|(reason, _)| reason.to_owned())
        .ok_or_else(|| format!("not a named error: {line}"))
}
