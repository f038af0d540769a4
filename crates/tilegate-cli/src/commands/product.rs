//! `product`: scenes added to a product's grid tiles, each touched tile planned as a job.

use crate::args::{ProductCommand, ProductIndexArgs, ProductPlanArgs};
use crate::ctx::Ctx;
use crate::errors::refused;
use crate::reports::ProductPlanReport;
use std::process::ExitCode;
use tilegate_core::product::{Method, Order, Stat};
use tilegate_core::{Compression, Prefix, Reason, Tenant};
use tilegate_pipeline::product_index::index_product;
use tilegate_planner::product::{ProductDefinition, ProductOptions, plan_product};
use tilegate_source::Origin;

impl ProductCommand {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        match self {
            Self::Plan(a) => a.exec(cx).await,
            Self::Index(a) => a.exec(cx).await,
        }
    }
}

impl ProductIndexArgs {
    async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        let (prefix, tenant) = place(&self.prefix, &self.tenant)?;
        let root = tenant.root(&prefix)?;
        let b = cx.open().await?;
        let index = index_product(&b, &root, &self.name, &cx.sel.objects_root()).await?;
        cx.out.emit(&index);
        Ok(ExitCode::SUCCESS)
    }
}

impl ProductPlanArgs {
    async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        let opts = self.options(cx)?;
        let mut sources = self.scenes.clone();
        if let Some(from) = &self.from {
            let listed = tilegate_pipeline::batch::sources(from)?;
            if listed.is_empty() {
                return Err(refused(
                    Reason::BadOption,
                    format!("--from {from}: lists no scene"),
                ));
            }
            sources.extend(listed);
        }
        let b = cx.open().await?;
        let started = std::time::Instant::now();
        let plan = plan_product(&b, &opts, &sources, Origin::Operator).await?;
        cx.out.emit(&ProductPlanReport {
            product: self.name,
            grid: opts.definition.grid,
            tiles: plan.planned_tiles(),
            scenes: plan.scenes,
            elapsed_s: started.elapsed().as_secs_f64(),
        });
        Ok(ExitCode::SUCCESS)
    }

    fn options(&self, cx: &Ctx) -> anyhow::Result<ProductOptions> {
        let bad = |what: &str, v: &str, expected: &str| {
            refused(
                Reason::BadRecipe,
                format!("{what} `{v}`: expected {expected}"),
            )
        };
        let method = match self.recipe.as_str() {
            "mosaic" => Method::Mosaic {
                order: Order::parse(&self.order)
                    .ok_or_else(|| bad("--order", &self.order, "newest, oldest or least-cloud"))?,
            },
            "composite" => Method::Composite {
                stat: Stat::parse(&self.stat).ok_or_else(|| {
                    bad(
                        "--stat",
                        &self.stat,
                        "median, mean, min, max, count or p10…p90",
                    )
                })?,
            },
            other => return Err(bad("--recipe", other, "mosaic or composite")),
        };
        let grid = tilegate_core::product::UtmGrid::parse(&self.grid)
            .map_err(|e| refused(Reason::BadRecipe, e.to_string()))?;
        let compression = Compression::parse(&self.compress)
            .ok_or_else(|| bad("--compress", &self.compress, "deflate, zstd or lzw"))?;
        let (prefix, tenant) = place(&self.prefix, &self.tenant)?;
        Ok(ProductOptions {
            definition: ProductDefinition {
                name: self.name.clone(),
                grid: grid.canonical(),
                method,
                resampling: self.resampling.clone(),
                compression,
                window: self.window,
            },
            policy: cx.policy_of(&tenant),
            prefix,
            tenant,
            manifest_shards: 1,
        })
    }
}

/// A product's `--prefix` and `--tenant`, each a key segment (refused `unsafe-key-segment`).
fn place(prefix: &str, tenant: &str) -> anyhow::Result<(Prefix, Tenant)> {
    let unsafe_segment =
        |e: tilegate_core::KeyError| refused(Reason::UnsafeKeySegment, e.to_string());
    Ok((
        Prefix::parse(prefix).map_err(unsafe_segment)?,
        Tenant::parse(tenant).map_err(unsafe_segment)?,
    ))
}
