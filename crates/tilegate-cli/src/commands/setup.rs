//! `init`, `sample-scene` and `demo`: getting started.

use super::work::{emit_run, run_source};
use crate::args::{DemoArgs, InitArgs, SampleArgs};
use crate::ctx::Ctx;
use crate::reports;
use anyhow::Context;
use std::process::ExitCode;
use std::time::Instant;
use tilegate_core::{Prefix, Recipe, Tenant};

impl InitArgs {
    /// `tilegate init`: create the cloud resources of the selection, idempotently.
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        let urls = cx.sel.urls();
        let mut report = tilegate_backends::init(&urls, self.create_bucket).await?;
        if let Some(url) = self.arrivals.as_deref() {
            tilegate_backends::init_arrivals(url, &mut report).await?;
        }
        cx.out.emit(&reports::InitReport {
            created: report.created,
            existing: report.existing,
        });
        Ok(ExitCode::SUCCESS)
    }
}

impl SampleArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        sample_scene(cx, self).await
    }
}

impl DemoArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        demo(cx, self).await
    }
}

async fn sample_scene(cx: &Ctx, a: SampleArgs) -> anyhow::Result<ExitCode> {
    let opts = tilegate_cog::SampleOptions {
        width: a.width.unwrap_or(a.size),
        height: a.height.unwrap_or(a.size),
        bands: a.bands,
        dtype: a.dtype.clone(),
        nodata: a.nodata,
        seed: a.seed,
    };
    let started = Instant::now();
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let path = a.out.clone();
    let meta = tokio::task::spawn_blocking(move || tilegate_cog::sample_scene(&path, &opts))
        .await?
        .with_context(|| format!("write sample scene {}", a.out.display()))?;
    cx.out.emit(&reports::SampleReport {
        path: a.out,
        width: meta.width,
        height: meta.height,
        bands: meta.bands,
        dtype: meta.dtype,
        nodata: meta.nodata,
        elapsed_s: started.elapsed().as_secs_f64(),
    });
    Ok(ExitCode::SUCCESS)
}

async fn demo(cx: &Ctx, a: DemoArgs) -> anyhow::Result<ExitCode> {
    let (out, sel) = (&cx.out, &cx.sel);
    let b = cx.open().await?;
    std::fs::create_dir_all(&sel.data)?;
    let scene = sel.data.join(format!("sample-{}.tif", a.size));
    if !scene.exists() {
        // A word on a terminal while it is written (logs and scripts get the summary).
        if !out.json && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            eprintln!(
                "tilegate: writing a {0}×{0} UInt16 sample scene to {1}",
                a.size,
                scene.display()
            );
        }
        let path = scene.clone();
        let opts = tilegate_cog::SampleOptions {
            width: a.size,
            height: a.size,
            bands: 1,
            dtype: "UInt16".into(),
            nodata: None,
            seed: 1,
        };
        tokio::task::spawn_blocking(move || tilegate_cog::sample_scene(&path, &opts))
            .await?
            .with_context(|| format!("write sample scene {}", scene.display()))?;
    }
    let source = scene.to_string_lossy().into_owned();
    let ran = run_source(
        cx,
        &b,
        (&source, &[], 1),
        Recipe::copy_all(),
        (Prefix::default(), Tenant::default()),
        &a.pool,
        Some(&a.assemble),
    )
    .await?;
    Ok(emit_run(out, &ran))
}
