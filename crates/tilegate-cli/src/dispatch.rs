//! The dispatcher: the command line's grammar ([`Cli`], [`Command`]) and, from the same list,
//! the match from each command to its `exec` in `crate::commands`. It builds the [`Ctx`] every
//! command is given and does nothing else; a new command is its own file under `commands/`
//! (and its `mod` line there) plus its one line in `commands!` here.

use crate::args::*;
use crate::commands::{self, catalog};
use crate::ctx::Ctx;
use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// tilegate turns one raster scene into Cloud Optimized GeoTIFF tiles, written exactly once
/// however often workers repeat, crash or race.
///
/// Quick start: `tilegate demo`, or `tilegate run scene.tif` then `tilegate status`.
///
/// By default every command works on the embedded backend in --data DIR (objects as ordinary
/// files under DIR/objects, tables and queue in DIR/tilegate.db), shared safely by several
/// processes on one machine. --objects s3://bucket/prefix, --tables dynamodb://table-prefix
/// and --queue sqs://queue-name select AWS instead (region, credentials and endpoints come
/// from the AWS SDK's standard configuration: AWS_REGION, AWS_PROFILE, AWS_ENDPOINT_URL).
#[derive(Debug, Parser)]
#[command(name = "tilegate", version, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Declares [`Command`] and its dispatch together, so that a command is one line here: its
/// variant and its arguments type, whose `exec(self, &Ctx)` runs it (its `--help` summary is
/// the line's doc comment, or the type's).
macro_rules! commands {
    ($( $(#[$meta:meta])* $variant:ident($args:ty), )*) => {
        #[derive(Debug, Subcommand)]
        pub enum Command {
            $( $(#[$meta])* $variant($args), )*
        }

        impl Command {
            async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
                match self {
                    $( Self::$variant(a) => a.exec(cx).await, )*
                }
            }
        }
    };
}

commands! {
    /// Write a deterministic synthetic terrain scene (tiled GeoTIFF, EPSG:32633, 10 m pixels).
    SampleScene(SampleArgs),
    /// Plan a job and enqueue its windows (planning it again enqueues only the windows not yet
    /// recorded; `--all-windows` enqueues them all).
    Plan(PlanArgs),
    /// Many scenes, one product: mosaics and composites on a tile grid, one job per tile,
    /// updated as scenes are added (`product plan`).
    #[command(subcommand)]
    Product(ProductCommand),
    /// Work on queued windows until stopped (Ctrl-C / SIGTERM finishes in-flight work).
    Work(WorkArgs),
    /// Plan, then work in this process until every window of the job is in the manifest.
    Run(RunArgs),
    /// Create the bucket (with --create-bucket), tables and queues of the selected backends.
    Init(InitArgs),
    /// Assemble a complete job's tiles into one scene COG, published once through the claim gate.
    Assemble(AssembleArgs),
    /// Recompute one window and replace its tile only if it is unchanged since read (If-Match).
    Repair(RepairArgs),
    /// Re-enqueue a job's windows (all, or only those missing from the manifest) beside live work.
    Backfill(BackfillArgs),
    /// Abort incomplete multipart uploads older than a given age.
    CleanupUploads(CleanupArgs),
    /// Produce a window (or, with --scene, the scene from the accepted tiles) again as a new
    /// attempt at its own immutable key, then publish it by moving the pointer (the previous attempt is retired, kept until its
    /// retention ends). `assemble`, `status` and `url` follow the pointer.
    Regenerate(RegenerateArgs),
    /// Publish an attempt: move the window's pointer onto it in one conditional write.
    Accept(AcceptArgs),
    /// List a job's attempts (ledger rows) and pointers.
    Attempts(AttemptsArgs),
    /// Set or release a legal hold on an attempt (a held attempt is never deleted).
    Hold(HoldArgs),
    /// Delete what retention says is due, in two steps: mark the due ledger rows, then delete
    /// each one's exact key at its recorded ETag. Never lists, never deletes a prefix.
    Gc(GcArgs),
    /// Compare a job's objects with its rows: report orphans, missing objects and
    /// size/ETag disagreements. Deletes nothing.
    Reconcile(ReconcileArgs),
    /// A time-limited URL of a window's accepted attempt, issued only to the job's tenant
    /// and never valid past the attempt's retention (S3: SigV4 presigned).
    Url(UrlArgs),
    /// Show a job: windows by state (written, already present, encode skipped, dead-lettered,
    /// missing), counters, dead letters, workers, queue depth and cost. `--watch` follows it live.
    Status(StatusArgs),
    /// Write a job's report: one self-contained HTML page (the window grid coloured by state,
    /// timings per step, throughput, duplicates absorbed, dead letters, a thumbnail of the
    /// scene and the job's cost). Built from stored rows; open it in any browser, offline.
    Report(ReportArgs),
    /// Print the STAC Items of jobs' assembled scenes (published beside each scene as
    /// `scenes/JOB.json`), and with --stac-collection write a STAC Collection over them.
    Stac(StacArgs),
    /// Deliver jobs' pending announcements (published scenes, jobs left incomplete) to the
    /// sinks named by --announce: one job, or every recent job with something pending.
    /// `reconcile-jobs` does this on a schedule, with a backoff.
    Announce(AnnounceArgs),
    /// Move every open job to its end from stored state alone — the safety net under the
    /// unattended flow's edges. Per open job (read through the tables' index of open jobs, so
    /// a pass costs what the open jobs cost, never the finished ones): enqueue the windows a
    /// lost planner never enqueued, assemble a complete job through the claim gate, record
    /// `incomplete` for windows the queue dead-lettered unannounced, deliver pending
    /// announcements (backoff per job, a cap per pass), and settle a job with nothing left.
    /// Every action is the fast path's own conditional write: run it beside the pools, as often
    /// as you like, on as many hosts as you like.
    ///
    ///   tilegate reconcile-jobs --once --announce sns:arn:aws:sns:…:scenes
    ///   tilegate reconcile-jobs --every 60          # until Ctrl-C / SIGTERM
    #[command(verbatim_doc_comment)]
    ReconcileJobs(ReconcileJobsArgs),
    /// Plan each scene that lands, with nobody typing `plan`: consume S3 event notifications
    /// (direct, through EventBridge or SNS) and STAC Items from the arrivals queue, and/or watch
    /// directories for new files, and plan each with the recipe given here. A repeated
    /// notification of the same object plans nothing (the job ID absorbs it). Runs until
    /// stopped (Ctrl-C / SIGTERM), or with --until-idle until a round finds nothing.
    ///
    /// Beside `work --assemble --announce SINK`, this is the unattended pipeline: a scene lands,
    /// is planned, tiled, assembled and announced.
    Ingest(IngestArgs),
    /// List or redrive dead letters.
    #[command(subcommand)]
    Dlq(DlqCommand),
    /// Serve the job API over HTTP for tenants: plan jobs, follow them live, read reports and
    /// STAC Items, sign URLs of outputs, regenerate and accept — each request proved by an API
    /// key (`tilegate keys create`) or an OIDC token, scoped to its tenant, rate-limited and
    /// audited. Stateless over the selected backends: run as many as the load needs. The
    /// OpenAPI document is at /v1/openapi.json, a page for people at /.
    ///
    ///   tilegate keys create --tenant acme      # prints the key once
    ///   tilegate serve --listen 127.0.0.1:8080
    ///   curl -H "Authorization: Bearer $KEY" http://127.0.0.1:8080/v1/jobs
    #[command(verbatim_doc_comment)]
    Serve(ServeArgs),
    /// Make, list, revoke and rotate the API keys `serve` accepts. A key is shown once, when
    /// it is made; only its hash is stored (in the object store, under `_service/keys/`).
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Make a 4096×4096 sample scene (if absent) and run it: 64 tiles.
    Demo(DemoArgs),
    /// List the recipes `--recipe` accepts: the built-in ones with their flags, and those
    /// registered by this binary with their `--param NAME=VALUE` parameters.
    Recipes(catalog::RecipesArgs),
    Config(commands::config::ConfigArgs),
    /// Print the JSON Schema of a command's `--json` document (`tilegate schema status`);
    /// without a name, list the documents. The same schemas are in the repository's
    /// `docs/json/`.
    Schema(catalog::SchemaArgs),
}

/// Run the command the line names.
pub async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    // Requests are counted for the job they serve; a command that serves one job names it.
    tilegate_retry::meter::scope(None, dispatch_command(cli)).await
}

async fn dispatch_command(cli: Cli) -> anyhow::Result<ExitCode> {
    let cx: Ctx = commands::context(&cli.global)?;
    cli.command.exec(&cx).await
}
