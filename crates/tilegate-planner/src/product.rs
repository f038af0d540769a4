//! Products: scenes added to a product's tiles, and each touched tile planned as a job over
//! every scene it has (see [`tilegate_core::product`]).
//!
//! What a product holds is stored beside its outputs, one object per fact, each written
//! create-if-absent so that a scene added twice writes nothing the second time:
//! `products/{name}/product.json` (grid, method, resampling — fixed when first planned) and
//! `products/{name}/tiles/{tile}/scenes/{scene}.json` (one input of one tile). Planning a tile
//! lists its own scenes only: its cost follows the tile's inputs, never the product's size.

use crate::plan::{Enqueue, Plan, PlanError, PlanTimings, plan_record};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use tilegate_core::ObjectKey;
use tilegate_core::object::{ObjectStoreExt as _, PutOutcome};
use tilegate_core::product::{
    GridTile, Method, ProductError, ProductInput, ProductSpec, Stat, UtmGrid, scene_id,
};
use tilegate_core::recipe::{Operation, RecipeError, WARP_RESAMPLINGS};
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, Compression, Grid, JobId, Prefix, Recipe, StoreError, Tenant};
use tilegate_source::{Origin, ResolvedSource, SourcePolicy};

/// A product's definition, fixed when it is first planned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProductDefinition {
    pub name: String,
    /// The grid's canonical text.
    pub grid: String,
    #[serde(flatten)]
    pub method: Method,
    pub resampling: String,
    /// The tile COGs' compression.
    pub compression: Compression,
    /// The window side a tile is planned with (fitted to the tile).
    pub window: u32,
}

/// What to plan: the product and where its outputs go.
#[derive(Debug, Clone)]
pub struct ProductOptions {
    pub definition: ProductDefinition,
    pub prefix: Prefix,
    pub tenant: Tenant,
    pub policy: Arc<SourcePolicy>,
    pub manifest_shards: u32,
}

/// One scene added to a product: its identity and the tiles it touches.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct AddedScene {
    pub id: String,
    pub source: String,
    pub tiles: Vec<String>,
    /// Tiles that did not have the scene before (empty for a scene added again).
    pub new_in: Vec<String>,
}

/// What planning a product did: the scenes added, and each tile it planned.
#[derive(Debug)]
pub struct ProductPlan {
    pub scenes: Vec<AddedScene>,
    pub tiles: Vec<(String, Plan)>,
}

/// One tile a product's planning planned, as reports say it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct PlannedTile {
    pub tile: String,
    pub job_id: JobId,
    /// The tile's input scenes now.
    pub inputs: usize,
    /// False when the tile's job was planned before (its input set did not change).
    pub newly_planned: bool,
    pub windows: u64,
    pub enqueued: u64,
}

impl ProductPlan {
    /// Each tile planned, as reports say it.
    pub fn planned_tiles(&self) -> Vec<PlannedTile> {
        self.tiles
            .iter()
            .map(|(tile, p)| PlannedTile {
                tile: tile.clone(),
                job_id: p.job.job_id.clone(),
                inputs: match &p.job.recipe.operation {
                    Operation::Product(s) => s.inputs.len(),
                    _ => 0,
                },
                newly_planned: p.newly_planned,
                windows: p.windows,
                enqueued: p.enqueued,
            })
            .collect()
    }

    /// Whether it changed nothing: every scene was the product's before and every tile's job
    /// was planned and enqueued before (a scene delivered again).
    pub fn changed_nothing(&self) -> bool {
        self.scenes.iter().all(|s| s.new_in.is_empty())
            && self
                .tiles
                .iter()
                .all(|(_, p)| !p.newly_planned && p.enqueued == 0)
    }
}

fn refuse(e: ProductError) -> PlanError {
    PlanError::Recipe(RecipeError::Custom(e.to_string()))
}

fn grid_of(def: &ProductDefinition) -> Result<UtmGrid, PlanError> {
    UtmGrid::parse(&def.grid).map_err(refuse)
}

/// Add `sources` (paths, URIs or STAC Items, from `origin`) to the product and plan every
/// tile they touch over all of its scenes. A tile whose input set did not change plans the
/// same job as before, and enqueues nothing.
pub async fn plan_product(
    b: &Backends,
    opts: &ProductOptions,
    sources: &[String],
    origin: Origin<'_>,
) -> Result<ProductPlan, PlanError> {
    check(&opts.definition)?;
    let root = opts.tenant.root(&opts.prefix)?;
    define(b, &root, &opts.definition).await?;
    let mut resolved = Vec::with_capacity(sources.len());
    for source in sources {
        resolved.push(if tilegate_source::stac::is_item(source) {
            tilegate_source::stac::resolve_item(b, &opts.policy, source, &[], origin).await?
        } else {
            tilegate_source::resolve(b, &opts.policy, source, origin).await?
        });
    }
    add_scenes(b, opts, &root, resolved).await
}

/// Add scenes already resolved (and judged by the policy: an arrival's) to a product whose
/// definition `opts` carries as [`definition`] read it from the store (so it is not written
/// or compared again), and plan every tile they touch. Adding a scene the product has plans
/// nothing new.
pub async fn plan_product_resolved(
    b: &Backends,
    opts: &ProductOptions,
    resolved: Vec<ResolvedSource>,
) -> Result<ProductPlan, PlanError> {
    check(&opts.definition)?;
    let root = opts.tenant.root(&opts.prefix)?;
    add_scenes(b, opts, &root, resolved).await
}

/// The stored definition of product `name` under `root`, to add arrivals to.
pub async fn definition(
    b: &Backends,
    root: &Prefix,
    name: &str,
) -> Result<ProductDefinition, PlanError> {
    tilegate_core::product::check_name(name).map_err(refuse)?;
    let key = root.product_key(name);
    match read_json(b, &key).await {
        Err(PlanError::Store(StoreError::NotFound { .. })) => {
            Err(refuse(ProductError::Inputs(format!(
                "product `{name}` is not defined under {root}: define it first with \
                 `tilegate product plan {name} --grid … --recipe …` (no scene needed)"
            ))))
        }
        other => other,
    }
}

fn check(def: &ProductDefinition) -> Result<(), PlanError> {
    tilegate_core::product::check_name(&def.name).map_err(refuse)?;
    grid_of(def)?;
    if !WARP_RESAMPLINGS.contains(&def.resampling.as_str()) {
        return Err(RecipeError::Custom(format!(
            "resampling `{}`: expected one of {}",
            def.resampling,
            WARP_RESAMPLINGS.join(", ")
        ))
        .into());
    }
    Ok(())
}

async fn add_scenes(
    b: &Backends,
    opts: &ProductOptions,
    root: &Prefix,
    resolved: Vec<ResolvedSource>,
) -> Result<ProductPlan, PlanError> {
    let def = &opts.definition;
    let grid = grid_of(def)?;
    let mut scenes = Vec::with_capacity(resolved.len());
    let mut touched = std::collections::BTreeSet::new();
    for source in resolved {
        let input = pin(source).await?;
        let placement = input.scene.placement.as_ref().ok_or_else(|| {
            refuse(ProductError::Inputs(format!(
                "`{}` has no CRS: a product places every scene on its grid",
                input.source.uri
            )))
        })?;
        let tiles = tilegate_cog::tiles_touched(&grid, placement);
        let mut new_in = Vec::new();
        let body = Bytes::from(serde_json::to_vec(&input).expect("an input serializes"));
        for tile in &tiles {
            let code = tile.to_string();
            let key = root.product_scene_key(&def.name, &code, &input.id);
            if let PutOutcome::Written(_) = b.objects.put_create(&key, body.clone()).await? {
                new_in.push(code);
            }
        }
        tracing::info!(product = %def.name, scene = %input.id, source = %input.source.uri,
            tiles = tiles.len(), new = new_in.len(), "scene added to the product");
        touched.extend(tiles.iter().copied());
        scenes.push(AddedScene {
            id: input.id.clone(),
            source: input.source.uri.clone(),
            tiles: tiles.iter().map(ToString::to_string).collect(),
            new_in,
        });
    }
    let mut tiles = Vec::with_capacity(touched.len());
    for tile in touched {
        let record = tile_job(b, opts, root, &grid, &tile).await?;
        let plan = plan_record(b, record, false, Enqueue::Once, PlanTimings::default()).await?;
        tiles.push((tile.to_string(), plan));
    }
    Ok(ProductPlan { scenes, tiles })
}

/// Write the product's definition once; a later plan must say the same.
async fn define(b: &Backends, root: &Prefix, def: &ProductDefinition) -> Result<(), PlanError> {
    let key = root.product_key(&def.name);
    let body = Bytes::from(serde_json::to_vec_pretty(def).expect("a definition serializes"));
    if let PutOutcome::Written(_) = b.objects.put_create(&key, body).await? {
        return Ok(());
    }
    let stored: ProductDefinition = read_json(b, &key).await?;
    if stored != *def {
        return Err(refuse(ProductError::Inputs(format!(
            "product `{}` is defined as {} {} ({} resampling, {} compression, window {}); plan \
             it with the same grid, method, resampling, compression and window, or name \
             another product",
            def.name,
            stored.grid,
            method_text(&stored.method),
            stored.resampling,
            stored.compression.gdal_name().to_ascii_lowercase(),
            stored.window
        ))));
    }
    Ok(())
}

fn method_text(m: &Method) -> String {
    match m {
        Method::Mosaic { order } => format!("mosaic --order {}", order.name()),
        Method::Composite { stat } => format!("composite --stat {}", stat.name()),
    }
}

async fn read_json<T: serde::de::DeserializeOwned>(
    b: &Backends,
    key: &ObjectKey,
) -> Result<T, PlanError> {
    let found = b.objects.get_bytes(key).await?;
    serde_json::from_slice(&found.bytes).map_err(|e| {
        PlanError::Store(StoreError::Corrupt {
            what: "product document",
            key: key.to_string(),
            detail: e.to_string(),
        })
    })
}

/// Probe one resolved (pinned) scene of the product.
async fn pin(resolved: ResolvedSource) -> Result<ProductInput, PlanError> {
    let path = resolved.gdal_path.clone();
    let (scene, cloud_cover) = tokio::task::spawn_blocking(move || {
        let scene = tilegate_cog::probe(&path)?;
        Ok::<_, tilegate_cog::CogError>((scene, tilegate_cog::cloud_cover(&path)))
    })
    .await
    .expect("probe task panicked")?;
    Ok(ProductInput {
        id: scene_id(&resolved.info),
        source: resolved.info,
        scene,
        cloud_cover,
    })
}

/// The job of one tile over every scene it has now.
async fn tile_job(
    b: &Backends,
    opts: &ProductOptions,
    root: &Prefix,
    grid: &UtmGrid,
    tile: &GridTile,
) -> Result<JobRecord, PlanError> {
    let def = &opts.definition;
    let code = tile.to_string();
    let listed = b
        .objects
        .list(&root.product_scenes_dir(&def.name, &code))
        .await?;
    let mut by_id = BTreeMap::new();
    for meta in listed {
        let key = ObjectKey::checked(&meta.key)?;
        let input: ProductInput = read_json(b, &key).await?;
        by_id.insert(input.id.clone(), input);
    }
    let inputs: Vec<ProductInput> = by_id.into_values().collect();
    let first = inputs.first().ok_or_else(|| {
        PlanError::Store(StoreError::NotFound {
            what: "product tile's scenes",
            key: root.product_scenes_dir(&def.name, &code),
        })
    })?;
    if let Some(odd) = inputs
        .iter()
        .find(|i| (i.scene.bands, &i.scene.dtype) != (first.scene.bands, &first.scene.dtype))
    {
        return Err(refuse(ProductError::Inputs(format!(
            "tile {code}: `{}` has {} bands of {} and `{}` {} bands of {}: a product's scenes \
             share their bands and type",
            first.source.uri,
            first.scene.bands,
            first.scene.dtype,
            odd.source.uri,
            odd.scene.bands,
            odd.scene.dtype
        ))));
    }
    let (bands, dtype, nodata) = match def.method {
        Method::Mosaic { .. } => {
            // One nodata for every input, or a mask where none observed the pixel.
            let common = first
                .scene
                .nodata
                .filter(|v| !v.is_nan() && inputs.iter().all(|i| i.scene.nodata == Some(*v)));
            (first.scene.bands, first.scene.dtype.clone(), common)
        }
        Method::Composite { stat: Stat::Count } => (1, "UInt16".to_owned(), None),
        Method::Composite { .. } => (first.scene.bands, "Float32".to_owned(), Some(f64::NAN)),
    };
    let scene = tilegate_cog::tile_scene(grid, tile, bands, &dtype, nodata).ok_or_else(|| {
        refuse(ProductError::Inputs(format!(
            "tile {code}: EPSG:{} is unknown to PROJ",
            tile.epsg()
        )))
    })?;
    let spec = ProductSpec {
        product: def.name.clone(),
        grid: grid.canonical(),
        tile: code,
        method: def.method,
        resampling: def.resampling.clone(),
        inputs,
    };
    let source = spec.source();
    let window = Grid::fitted_window(scene.width, scene.height, def.window);
    let recipe = Recipe {
        operation: Operation::Product(Box::new(spec)),
        compression: def.compression,
        window,
    };
    Ok(JobRecord::planned(
        source,
        recipe,
        Grid::new(scene.width, scene.height, window)?,
        root.clone(),
        opts.tenant.clone(),
        scene,
        opts.manifest_shards,
    ))
}
