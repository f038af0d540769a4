//! What a job will cost before it starts (`plan --estimate`): the job `plan` would write,
//! derived without writing it; a few of its windows encoded here to learn its tiles' size; and
//! the requests a run of it sends, by service and operation, under the same names the stores
//! count them by (`requests_total{service,op}`), so that the price table and the arithmetic of
//! `status --cost` ([`tilegate_report`]'s `cost::estimate`) price the prediction exactly as
//! they price the count.
//!
//! The request model is the run sequence (`tilegate run`, or `plan` + `work --assemble`) on
//! each provider, as the stores send it: per window one create-if-absent PUT of the tile, one
//! manifest row, a tenth of a `SendMessageBatch` and of a `DeleteMessageBatch`, and a share of a
//! receive; the assembler reads every tile once and writes the scene (one PUT, or a multipart
//! upload above the threshold) and its STAC Item; per job a handful of reads of the job row,
//! the claim and the counters. Duplicate deliveries, retries and redrives add to a real run's
//! count and are not predicted. A source's own reads (GDAL's range requests) are not counted
//! by the stores and so are in neither figure.

use std::collections::BTreeMap;
use tilegate_cog::CogError;
use tilegate_core::metrics as m;
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, Window};
use tilegate_planner::{PlanError, PlanOptions};

/// The providers a run's requests go to, as the stores name their services.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Services {
    /// The object store: `s3`, `gcs`, `azure`, or a store that sends no billed requests
    /// (`local`, `memory`).
    pub objects: &'static str,
    /// The tables are DynamoDB (billed per request) rather than SQLite.
    pub dynamodb: bool,
    /// The queue is SQS (billed per request) rather than SQLite.
    pub sqs: bool,
}

impl Services {
    /// Whether the object store bills per request (a cloud store, not a local one).
    fn objects_billed(&self) -> bool {
        matches!(self.objects, "s3" | "gcs" | "azure")
    }

    /// The services billed per request, by name.
    pub fn billed(&self) -> Vec<String> {
        let objects = self.objects_billed().then_some(self.objects);
        [
            objects,
            self.dynamodb.then_some("dynamodb"),
            self.sqs.then_some("sqs"),
        ]
        .into_iter()
        .flatten()
        .map(str::to_owned)
        .collect()
    }
}

/// How the scene will be uploaded (the assembler's options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upload {
    pub multipart_threshold: u64,
    pub part_size: u64,
}

/// Windows encoded to learn the tiles' size.
pub const SAMPLE_WINDOWS: usize = 4;

/// A job's predicted run.
#[derive(Debug, Clone)]
pub struct Estimate {
    /// The job `plan` would write (not written).
    pub job: JobRecord,
    /// Whether a job row with this ID exists already (the source was planned before).
    pub already_planned: bool,
    /// Windows encoded here to measure tile sizes, and their mean size in bytes.
    pub sampled_windows: usize,
    pub mean_tile_bytes: u64,
    /// The predicted counters, named as a job's counters are (`requests_total{…}`,
    /// `bytes_sent_total{…}`, `bytes_received_total{…}`).
    pub counters: BTreeMap<String, u64>,
}

impl Estimate {
    /// Predicted bytes of all tiles.
    pub fn tile_bytes(&self) -> u64 {
        self.mean_tile_bytes * self.job.grid.len()
    }

    /// Predicted bytes of the scene COG (tiles plus overviews).
    pub fn scene_bytes(&self) -> u64 {
        scene_bytes(self.tile_bytes())
    }

    /// Bytes the job will keep: its tiles and its scene.
    pub fn stored_bytes(&self) -> u64 {
        self.tile_bytes() + self.scene_bytes()
    }
}

/// Why an estimate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum EstimateError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("encode a sample window")]
    Encode(#[from] CogError),
    #[error("read the source for a sample window")]
    Source(#[from] tilegate_planner::SourceError),
    #[error("estimate: storage")]
    Store(#[from] tilegate_core::StoreError),
}

impl EstimateError {
    pub fn reason_code(&self) -> tilegate_core::Reason {
        match self {
            Self::Plan(e) => e.reason_code(),
            Self::Encode(e) => e.reason_code(),
            Self::Source(e) => e.reason_code(),
            Self::Store(e) => tilegate_core::Reason::storage(e.is_retryable()),
        }
    }
}

/// Derive the job for `source` as `plan` would, encode a few of its windows, and predict the
/// requests and bytes of running it on `services`. Writes nothing.
pub async fn estimate(
    b: &Backends,
    source: &str,
    opts: &PlanOptions,
    services: Services,
    upload: Upload,
) -> Result<Estimate, EstimateError> {
    let (job, _) = tilegate_planner::derive(b, source, opts).await?;
    let already_planned = b.jobs.get_job(&job.job_id).await?.is_some();
    let sample = sample_windows(&job, SAMPLE_WINDOWS);
    let requests = sample
        .iter()
        .map(|&w| tilegate_worker::encode_request(&job, w))
        .collect::<Result<Vec<_>, _>>()?;
    let encoded = tokio::task::spawn_blocking(move || {
        requests
            .iter()
            .map(|r| tilegate_cog::encode_window(r).map(|t| t.len() as u64))
            .collect::<Result<Vec<_>, _>>()
    })
    .await
    .expect("sample encoding panicked")?;
    let mean_tile_bytes = if encoded.is_empty() {
        0
    } else {
        encoded.iter().sum::<u64>() / encoded.len() as u64
    };
    let mut e = Estimate {
        job,
        already_planned,
        sampled_windows: encoded.len(),
        mean_tile_bytes,
        counters: BTreeMap::new(),
    };
    e.counters = predicted(
        e.job.grid.len(),
        e.tile_bytes(),
        e.scene_bytes(),
        services,
        upload,
    );
    Ok(e)
}

/// Up to `n` windows spread evenly over the grid (row-major order), so that a scene whose
/// edges are empty and whose middle is busy is sampled in both.
fn sample_windows(job: &JobRecord, n: usize) -> Vec<Window> {
    let all: Vec<Window> = job.grid.windows().collect();
    let n = n.min(all.len());
    (0..n)
        .map(|i| all[(2 * i + 1) * all.len() / (2 * n)])
        .collect()
}

/// The scene COG: its full-resolution blocks are the tiles' blocks, copied byte for byte; each
/// overview level a quarter of the one above (a third more in all), plus headers.
fn scene_bytes(tile_bytes: u64) -> u64 {
    tile_bytes + tile_bytes / 3
}

/// Requests a run of each provider's share sends for the job, per job and per window.
mod per_job {
    /// S3: HEADs of the scene before the claim, after the upload, and of the Item.
    pub const S3_HEADS: u64 = 3;
    /// DynamoDB: the job row and the claim (PutItems beside the rows' transactions), the reads of the job
    /// row and the claim, the counter flushes, and the manifest counts of the pool's
    /// completion checks and the assembler's.
    pub const DYNAMO_PUTS: u64 = 2;
    pub const DYNAMO_GETS: u64 = 6;
    pub const DYNAMO_UPDATES: u64 = 6;
    pub const DYNAMO_QUERIES: u64 = 22;
    /// SQS: the queue's URL (planner, pool) and its depth (each stage's check).
    pub const SQS_URLS: u64 = 2;
    pub const SQS_DEPTHS: u64 = 4;
    /// Windows received per `ReceiveMessage` on average (batches of up to ten, fewer when the
    /// pool asks for only as many as it has room for).
    pub const WINDOWS_PER_RECEIVE: u64 = 4;
    /// Messages per `SendMessageBatch` and per `DeleteMessageBatch`.
    pub const SQS_BATCH: u64 = 10;
}

/// The predicted counters of a run of `windows` windows whose tiles come to `tile_bytes` and
/// whose scene to `scene_bytes`.
pub fn predicted(
    windows: u64,
    tile_bytes: u64,
    scene_bytes: u64,
    services: Services,
    upload: Upload,
) -> BTreeMap<String, u64> {
    let mut c = BTreeMap::new();
    let mut add = |service: &str, op: &str, n: u64| {
        if n > 0 {
            *c.entry(m::requests_by(service, op)).or_default() += n;
        }
    };
    let multipart = scene_bytes > upload.multipart_threshold;
    let parts = scene_bytes.div_ceil(upload.part_size.max(1));
    // Tiles, the STAC Item, and the scene when it goes up in one request.
    let single_puts = windows + 1 + u64::from(!multipart);
    match services.objects {
        "s3" => {
            add("s3", "PutObject", single_puts);
            add("s3", "GetObject", windows);
            add("s3", "HeadObject", per_job::S3_HEADS);
            if multipart {
                add("s3", "ListMultipartUploads", 1);
                add("s3", "CreateMultipartUpload", 1);
                add("s3", "UploadPart", parts);
                add("s3", "CompleteMultipartUpload", 1);
            }
        }
        "gcs" => {
            add("gcs", "insert", single_puts);
            add("gcs", "get_media", windows);
            if multipart {
                add("gcs", "resumable", 1);
                add("gcs", "upload_chunk", parts);
            }
        }
        "azure" => {
            add("azure", "PutBlob", single_puts);
            add("azure", "GetBlob", windows);
            if multipart {
                add("azure", "PutBlock", parts);
                add("azure", "PutBlockList", 1);
            }
        }
        _ => {}
    }
    if services.dynamodb {
        // Each manifest row is created in one transaction with its partition's row counter.
        add("dynamodb", "TransactWriteItems", windows);
        add("dynamodb", "PutItem", per_job::DYNAMO_PUTS);
        add("dynamodb", "GetItem", per_job::DYNAMO_GETS);
        add("dynamodb", "UpdateItem", per_job::DYNAMO_UPDATES);
        add("dynamodb", "Query", per_job::DYNAMO_QUERIES);
    }
    if services.sqs {
        add(
            "sqs",
            "SendMessageBatch",
            windows.div_ceil(per_job::SQS_BATCH),
        );
        add(
            "sqs",
            "DeleteMessageBatch",
            windows.div_ceil(per_job::SQS_BATCH),
        );
        add(
            "sqs",
            "ReceiveMessage",
            windows.div_ceil(per_job::WINDOWS_PER_RECEIVE),
        );
        add("sqs", "GetQueueUrl", per_job::SQS_URLS);
        add("sqs", "GetQueueAttributes", per_job::SQS_DEPTHS);
    }
    if services.objects_billed() {
        let service = services.objects;
        // Tiles and the scene go up; the assembler reads the tiles back.
        c.insert(m::bytes_sent_by(service), tile_bytes + scene_bytes);
        c.insert(m::bytes_received_by(service), tile_bytes);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    const AWS: Services = Services {
        objects: "s3",
        dynamodb: true,
        sqs: true,
    };
    const UPLOAD: Upload = Upload {
        multipart_threshold: 64 << 20,
        part_size: 16 << 20,
    };

    fn n(c: &BTreeMap<String, u64>, service: &str, op: &str) -> u64 {
        c.get(&m::requests_by(service, op)).copied().unwrap_or(0)
    }

    #[test]
    fn a_window_costs_a_put_a_row_a_read_and_a_share_of_the_queue() {
        let c = predicted(64, 6_000_000, 8_000_000, AWS, UPLOAD);
        assert_eq!(
            n(&c, "s3", "PutObject"),
            64 + 2,
            "tiles, the Item, the scene"
        );
        assert_eq!(n(&c, "s3", "GetObject"), 64);
        assert_eq!(
            n(&c, "dynamodb", "TransactWriteItems"),
            64,
            "a row and its count"
        );
        assert_eq!(n(&c, "dynamodb", "PutItem"), 2, "the job row and the claim");
        assert_eq!(n(&c, "sqs", "SendMessageBatch"), 7);
        assert_eq!(n(&c, "sqs", "DeleteMessageBatch"), 7);
        assert_eq!(n(&c, "s3", "UploadPart"), 0, "the scene fits one PUT");
    }

    #[test]
    fn a_large_scene_goes_up_in_parts() {
        let c = predicted(256, 60 << 20, 80 << 20, AWS, UPLOAD);
        assert_eq!(n(&c, "s3", "PutObject"), 257, "tiles and the Item");
        assert_eq!(n(&c, "s3", "CreateMultipartUpload"), 1);
        assert_eq!(n(&c, "s3", "UploadPart"), 5);
        assert_eq!(n(&c, "s3", "CompleteMultipartUpload"), 1);
    }

    #[test]
    fn the_embedded_backend_sends_nothing_billed() {
        let local = Services {
            objects: "local",
            dynamodb: false,
            sqs: false,
        };
        assert!(predicted(64, 1, 1, local, UPLOAD).is_empty());
    }
}
