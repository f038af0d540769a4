//! Command-line arguments.

use clap::{Args, Subcommand};
use std::path::PathBuf;

/// The flags every command takes, listed under their own heading after a command's own.
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub struct Global {
    /// Data directory of the embedded backend [default: ./tilegate-data].
    #[arg(long, global = true, env = "TILEGATE_DATA", value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Where objects live: `file://DIR` or `s3://bucket/prefix` (default: DATA/objects).
    #[arg(long, global = true, env = "TILEGATE_OBJECTS")]
    pub objects: Option<String>,
    /// Where the job, manifest, claim and counter tables live: `sqlite://FILE` or
    /// `dynamodb://table-prefix` (default: DATA/tilegate.db).
    #[arg(long, global = true, env = "TILEGATE_TABLES")]
    pub tables: Option<String>,
    /// The work queue: `sqlite://FILE` or `sqs://queue-name` (dead letters go to
    /// `<queue-name>-dlq`; default: the `work` queue in DATA/tilegate.db).
    #[arg(long, global = true, env = "TILEGATE_QUEUE")]
    pub queue: Option<String>,
    /// A TOML file with any of `data`, `objects`, `tables`, `queue` (flags and environment
    /// variables take precedence).
    #[arg(long, global = true, env = "TILEGATE_CONFIG")]
    pub config: Option<PathBuf>,
    /// A TOML file saying what jobs may read: `schemes`, `hosts`, `allow_addresses`,
    /// `buckets`, `max_document_bytes`, `max_redirects`, and `[tenants.NAME]` tables that
    /// replace them for one tenant. Default: every scheme, any public host, no loopback,
    /// private, link-local or metadata address, and a document's references within its own
    /// origin (see SECURITY.md).
    #[arg(
        long,
        global = true,
        env = "TILEGATE_SOURCE_POLICY",
        value_name = "FILE"
    )]
    pub source_policy: Option<PathBuf>,
    /// Print one machine-readable JSON document on stdout instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// More log output on stderr from tilegate's own crates (-v: info, -vv: debug; other crates
    /// log warnings only, and every line is redacted). TILEGATE_LOG replaces this with
    /// EnvFilter directives, e.g. `warn,tilegate=debug,reqwest=debug`.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Debug, Args)]
pub struct SampleArgs {
    /// Output GeoTIFF path.
    pub out: PathBuf,
    /// Width and height in pixels.
    #[arg(long, default_value_t = 4096)]
    pub size: u32,
    /// Width (overrides --size).
    #[arg(long)]
    pub width: Option<u32>,
    /// Height (overrides --size).
    #[arg(long)]
    pub height: Option<u32>,
    /// Number of bands.
    #[arg(long, default_value_t = 1)]
    pub bands: u32,
    /// Data type: Byte, UInt16, Int16, UInt32, Int32, Float32, Float64.
    #[arg(long, default_value = "UInt16")]
    pub dtype: String,
    /// Nodata value; a corner region of the scene is set to it.
    #[arg(long, allow_negative_numbers = true)]
    pub nodata: Option<f64>,
    /// Seed of the synthetic terrain.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// What to make of each window.
#[derive(Debug, Args, Clone)]
pub struct RecipeArgs {
    /// Operation: `copy` (re-encode), `warp` (reproject onto a target grid: --t-srs, --tr,
    /// --tap or --target-origin, --warp-resampling), `expr` (band math: --expr, --ot), `ndvi`
    /// (two bands → Float32; the expression `(nir-red)/(nir+red)`), a recipe registered by
    /// this binary (see `tilegate recipes`), or `noop` (commit a placeholder per window without
    /// reading the source: measures orchestration alone; such a job cannot be assembled).
    #[arg(long, default_value = "copy")]
    pub recipe: String,
    /// `warp`: the target CRS — `EPSG:3857`, a PROJ string or WKT.
    #[arg(long, value_name = "SRS")]
    pub t_srs: Option<String>,
    /// `warp`: target resolution in target units, `RES` or `XRES,YRES` (default: GDAL's
    /// suggestion, about the source's).
    #[arg(long, value_name = "XRES[,YRES]", value_delimiter = ',', num_args = 1)]
    pub tr: Option<Vec<f64>>,
    /// `warp`: align the grid's edges on multiples of the resolution (like `gdalwarp -tap`).
    #[arg(long)]
    pub tap: bool,
    /// `warp`: align the grid's edges on `X + i × XRES`, `Y + j × YRES` (a target grid given
    /// by its origin and --tr).
    #[arg(
        long,
        value_name = "X,Y",
        value_delimiter = ',',
        allow_negative_numbers = true
    )]
    pub target_origin: Option<Vec<f64>>,
    /// `warp`: resampling of the reprojection — near, bilinear, cubic, cubicspline, lanczos,
    /// average, rms, mode, max, min, med, q1, q3, sum. (--resampling is the overviews'.)
    #[arg(long, default_value = "near")]
    pub warp_resampling: String,
    /// `expr`: band math over b1, b2, …, one output band per `;`-separated expression, with
    /// the operators `+ - * / % ^`, comparisons, `&& || !`, and where(cond, a, b), abs, sqrt,
    /// exp, log, log10, floor, ceil, round, min, max, clamp, pow. E.g. "(b4-b3)/(b4+b3)".
    #[arg(long, value_name = "EXPRESSIONS", allow_hyphen_values = true)]
    pub expr: Option<String>,
    /// `expr`: output type — Byte, UInt16, Int16, UInt32, Int32, Float32, Float64. Integer
    /// outputs are rounded half to even and clamped to the type's range.
    #[arg(long, default_value = "Float32")]
    pub ot: String,
    /// `expr`: the output's nodata value (default: -9999 for Float and signed types, the
    /// type's maximum for unsigned ones).
    #[arg(long, allow_negative_numbers = true, value_name = "VALUE")]
    pub out_nodata: Option<f64>,
    /// The source is a STAC Item (a .json path or URL): these assets, comma-separated, become
    /// the job's bands in this order (each asset's first band, on the finest asset's grid).
    #[arg(long, value_delimiter = ',', value_name = "KEY,KEY")]
    pub assets: Vec<String>,
    /// Spread the job's manifest rows over N partitions (`JOB#NN` keys, 1–100). DynamoDB serves
    /// about 1,000 writes/s per partition: a job whose workers record more windows per second
    /// than that needs more than one (see the capacity model). Counts and listings query every
    /// shard; the count is kept on the job row, so every process agrees.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub manifest_shards: u32,
    /// Parameter of a registered recipe, `NAME=VALUE` (repeatable).
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// Bands for `copy`, 1-based, comma-separated (default: all).
    #[arg(long, value_delimiter = ',')]
    pub bands: Option<Vec<u32>>,
    /// Red band for `ndvi`.
    #[arg(long, default_value_t = 3)]
    pub red: u32,
    /// Near-infrared band for `ndvi`.
    #[arg(long, default_value_t = 4)]
    pub nir: u32,
    /// Tile compression: deflate, zstd or lzw.
    #[arg(long, default_value = "deflate")]
    pub compress: String,
    /// Window and COG block size in pixels: a multiple of 16, at most 8192. A window larger
    /// than the scene is fitted to it (the scene's larger side rounded up to 16: one window).
    #[arg(long, default_value_t = 512)]
    pub window: u32,
    /// Build a web pyramid instead of a COG: the source warped onto this OGC tile matrix
    /// set's base zoom (with --warp-resampling), cut into image tiles, each zoom above made
    /// from the tiles below, published as one PMTiles archive and/or `z/x/y` objects.
    /// `WebMercatorQuad`, `WorldCRS84Quad`, or a TMS 2.0 JSON document's path.
    #[arg(long, value_name = "TMS")]
    pub pyramid: Option<String>,
    /// `--pyramid`: the zooms, `MIN..MAX` (either may be left out: `..14`, `8..`). Default:
    /// the source's native resolution's zoom down to the zoom where it is one tile.
    #[arg(long, value_name = "MIN..MAX", requires = "pyramid")]
    pub zoom: Option<String>,
    /// `--pyramid`: the tiles' image format (PNG: 8-bit, transparent where nodata).
    #[arg(long, default_value = "png", value_name = "FORMAT")]
    pub tile_format: String,
    /// `--pyramid`: pack one band of elevation into RGB as MapLibre's terrain reads it —
    /// `terrarium` or `mapbox-terrain-rgb`.
    #[arg(long, value_name = "ENCODING", requires = "pyramid")]
    pub encoding: Option<String>,
    /// `--pyramid`: how a parent tile is made from its four children — `average` (of the
    /// valid pixels) or `nearest` (categories). Default: `nearest` for a paletted source,
    /// `average` otherwise.
    #[arg(long, value_name = "METHOD", requires = "pyramid")]
    pub overview_resampling: Option<String>,
    /// `--pyramid`: publish the tiles as one PMTiles archive (`pmtiles`, the default on
    /// WebMercatorQuad), `z/x/y` objects (`xyz`, the only layout of other sets: PMTiles v3
    /// addresses Web Mercator tiles alone) or both.
    #[arg(long, value_name = "LAYOUT", requires = "pyramid")]
    pub layout: Option<String>,
    /// Output key prefix: segments of [A-Za-z0-9._-] joined by `/`.
    #[arg(long, default_value = "tilegate")]
    pub prefix: String,
    /// Whose job it is: one segment of [A-Za-z0-9._-]. Each tenant gets jobs, rows and
    /// objects of its own (under PREFIX/tenants/TENANT); `default` keeps them under PREFIX.
    #[arg(long, default_value = "default", env = "TILEGATE_TENANT")]
    pub tenant: String,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Source raster: a path, file://, https://, s3://, gs:// or az:// URI, or a STAC Item
    /// (.json path or URL, with --assets).
    #[arg(required_unless_present = "from")]
    pub source: Option<String>,
    /// Plan one job per source listed in FILE (one per line; blank lines and `#` comments
    /// skipped), or per item of a STAC ItemCollection (.json); `-` reads stdin. Prints one
    /// line per job; exits 1 if any source could not be planned (the others still are).
    #[arg(long, value_name = "FILE", conflicts_with = "source")]
    pub from: Option<String>,
    #[command(flatten)]
    pub recipe: RecipeArgs,
    /// Enqueue every window again, recorded or not (by default planning a job that was
    /// planned before enqueues only the windows with no manifest row and, where the queue can
    /// say, no message still waiting; duplicates are safe either way, only wasted: the copies
    /// look for their tile before encoding).
    #[arg(long)]
    pub all_windows: bool,
    /// The default since planning skips recorded windows; kept for scripts that pass it.
    #[arg(long, hide = true, conflicts_with = "all_windows")]
    pub resume: bool,
    /// Say what the job would cost and plan nothing: the windows, the bytes its tiles and
    /// scene will take (a few windows are encoded here to learn their size) and the requests a
    /// run sends to each billed service, priced as `status --cost` prices a finished job's
    /// counted requests. Writes no job row and enqueues nothing.
    #[arg(long, conflicts_with_all = ["from", "all_windows"])]
    pub estimate: bool,
    /// With --estimate: the price table (TOML); default: the built-in table
    /// (`tilegate status --print-prices`).
    #[arg(
        long,
        env = "TILEGATE_PRICES",
        value_name = "FILE",
        requires = "estimate"
    )]
    pub prices: Option<PathBuf>,
}

#[derive(Debug, Args, Clone)]
pub struct PoolArgs {
    /// Encoder threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Messages in flight at once (default: 2 × threads + 2).
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Visibility timeout of received messages, seconds (renewed while work runs).
    #[arg(long, default_value_t = 120)]
    pub visibility: u64,
    /// Encode even when the tile already exists (the Create still refuses the copy).
    #[arg(long)]
    pub no_skip_existing: bool,
    /// On Ctrl-C or SIGTERM: stop receiving, give in-flight windows this many seconds to
    /// finish, then hand the rest back to the queue at once and exit. Keep it below the
    /// orchestrator's own limit (Kubernetes: terminationGracePeriodSeconds).
    #[arg(long, default_value_t = 30, value_name = "SECONDS")]
    pub shutdown_grace_s: u64,
    /// How often the pool adds its counters to the job's counter row. Every worker writes that
    /// one row: with hundreds of workers, lengthen it so their sum stays under DynamoDB's
    /// ~1,000 write units a second per partition (CAPACITY.md).
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    pub counter_flush_s: f64,
}

#[derive(Debug, Args)]
pub struct WorkArgs {
    #[command(flatten)]
    pub pool: PoolArgs,
    /// Exit once nothing is visible or in flight in the queue.
    #[arg(long)]
    pub until_empty: bool,
    /// Serve `GET /healthz` and `GET /metrics` (Prometheus text: the counters of every window
    /// this process handled) on this address, e.g. 0.0.0.0:9464.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Assemble each job's scene when this pool records its last window, exactly as
    /// `tilegate assemble` would (the claim gate lets one of many racing pools through): the
    /// unattended pipeline. One extra count request per window; every partition is counted
    /// only when a window fills its own (plan large jobs with --manifest-shards).
    #[arg(long)]
    pub assemble: bool,
    /// With --assemble, also reconcile every open job every this many seconds in the
    /// background (`tilegate reconcile-jobs`: enqueue what a lost planner did not, assemble what
    /// a lost trigger did not, announce what was left pending); 0: never.
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
    pub reconcile_every: f64,
    #[command(flatten)]
    pub assemble_flags: AssembleFlags,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Source raster: a path, file://, https://, s3://, gs:// or az:// URI, or a STAC Item
    /// (.json path or URL, with --assets), as for `plan`.
    #[arg(required_unless_present = "from")]
    pub source: Option<String>,
    /// Run every source listed in FILE, one after another (one per line, or the items of a
    /// STAC ItemCollection, as for `plan --from`; `-` reads stdin). A source that fails is
    /// reported and the list goes on.
    #[arg(long, value_name = "FILE", conflicts_with = "source")]
    pub from: Option<String>,
    /// Also write the published scene to FILE, a name of your choosing (a copy of the very
    /// version published, written to a temporary name and renamed into place; the store's
    /// scene stays where it is).
    /// An existing FILE is refused unless --force is given, and the job's own source always.
    #[arg(short = 'o', long = "out", value_name = "FILE", conflicts_with_all = ["from", "no_assemble"])]
    pub out_file: Option<PathBuf>,
    /// With -o, replace FILE if it exists (said on stderr). The job's own source is never
    /// replaced.
    #[arg(long, requires = "out_file")]
    pub force: bool,
    #[command(flatten)]
    pub recipe: RecipeArgs,
    #[command(flatten)]
    pub pool: PoolArgs,
    #[command(flatten)]
    pub assemble: AssembleFlags,
    /// Stop once the tiles are in place; do not assemble the scene.
    #[arg(long)]
    pub no_assemble: bool,
}

/// How the scene COG is built and published.
#[derive(Debug, Args, Clone)]
pub struct AssembleFlags {
    /// Scenes larger than this many bytes go up as multipart uploads.
    #[arg(long, default_value_t = tilegate_assembler::DEFAULT_MULTIPART_THRESHOLD)]
    pub multipart_threshold: u64,
    /// Multipart part size in bytes (at least 5 MiB).
    #[arg(long, default_value_t = tilegate_assembler::DEFAULT_PART_SIZE)]
    pub part_size: u64,
    /// Claim lease time-to-live in milliseconds (renewed every third of it while working).
    #[arg(long, default_value_t = 60_000)]
    pub lease_ttl_ms: u64,
    /// Overview resampling: average (skips nodata and masked-out pixels) or nearest. Every
    /// recipe defaults to average, except that a paletted (colour-table) scene always gets
    /// nearest: an average of class indices is a class that does not exist.
    #[arg(long, default_value = "average")]
    pub resampling: String,
    /// Announce each published scene (and each job a dead letter leaves incomplete) to SINK:
    /// `sns:TOPIC_ARN`, `eventbridge:BUS`, or an `https://` webhook (each POST signed with
    /// HMAC-SHA256 of TILEGATE_WEBHOOK_SECRET). Repeat it, or list them comma-separated in
    /// TILEGATE_ANNOUNCE. What a sink does not take stays pending on the job row for the next
    /// delivery (`tilegate announce`).
    #[arg(
        long = "announce",
        value_name = "SINK",
        env = "TILEGATE_ANNOUNCE",
        value_delimiter = ','
    )]
    pub announce: Vec<tilegate_core::announce::SinkSpec>,
    /// Test hook: stop renewing the lease after this many uploaded parts.
    #[arg(long, hide = true)]
    pub test_pause_renewals_after_parts: Option<u32>,
    /// Test hook: wait this many milliseconds after each uploaded part.
    #[arg(long, hide = true, default_value_t = 0)]
    pub test_part_delay_ms: u64,
}

#[derive(Debug, Args)]
pub struct AssembleArgs {
    /// Job ID, or a unique prefix of one (default: the newest job).
    pub job: Option<String>,
    /// Every job whose windows are all recorded and whose scene is not yet published (as
    /// `plan --from` planned them); jobs with windows still to do are listed, not assembled.
    #[arg(long, conflicts_with = "job")]
    pub all: bool,
    #[command(flatten)]
    pub flags: AssembleFlags,
}

#[derive(Debug, Args)]
pub struct IngestArgs {
    /// The arrivals queue: `sqs://queue-name` (dead letters in `queue-name-dlq`; send S3's
    /// notifications, an EventBridge rule's or an SNS subscription's there) or `sqlite://FILE`.
    /// Default: the `arrivals` queue in DATA/tilegate.db.
    #[arg(long, env = "TILEGATE_ARRIVALS", value_name = "URL")]
    pub arrivals: Option<String>,
    /// Also plan each file that appears under DIR (recursively; once its size and time have
    /// stood still for --settle). Hidden files are never planned: write `.NAME.tmp`, then
    /// rename it into place. A file that is not a whole raster (not one GDAL opens, a TIFF
    /// cut short) is refused, said once. Repeatable.
    #[arg(long, value_name = "DIR")]
    pub watch: Vec<PathBuf>,
    /// Seconds a watched file's size and time must stand still before it is planned, counted
    /// from when they were first seen: longer than any pause of a writer. A file renamed into
    /// place waits it too (a scan cannot tell a rename from a paused writer); 0 plans on the
    /// first scan that sees a file, for inboxes whose writers only ever rename into place.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    pub settle: f64,
    /// Accept object notifications from this bucket (`s3://BUCKET`; repeatable). A
    /// notification from any other bucket is refused and dead-lettered, never read.
    #[arg(long = "bucket", value_name = "s3://BUCKET")]
    pub buckets: Vec<String>,
    /// Plan only keys (watched files: paths under the directory) starting with PREFIX
    /// (repeatable; default: any).
    #[arg(long = "key-prefix", value_name = "PREFIX")]
    pub key_prefixes: Vec<String>,
    /// Plan only keys or files ending with SUFFIX, e.g. `.tif` (repeatable; default: any).
    #[arg(long = "key-suffix", value_name = "SUFFIX")]
    pub key_suffixes: Vec<String>,
    /// Plan only STAC Items of this collection (repeatable; default: any). Items become jobs
    /// with --assets; their hrefs must reach hosts and buckets the source policy lists.
    #[arg(long = "collection", value_name = "ID")]
    pub collections: Vec<String>,
    /// Add each arrival to product NAME (define it first with `tilegate product plan NAME
    /// --grid … --recipe …`, no scene needed; under the same --prefix and --tenant): the
    /// tiles it touches are planned over their scenes, with the product's recipe. A scene
    /// delivered again plans nothing.
    #[arg(long, value_name = "NAME")]
    pub product: Option<String>,
    /// Exit once a round finds no message and no new file.
    #[arg(long)]
    pub until_idle: bool,
    /// Seconds between scans of the watched directories.
    #[arg(long, default_value_t = 2.0, value_name = "SECONDS")]
    pub poll_s: f64,
    /// Print this configuration as the JSON the Lambda function's TILEGATE_INGEST takes, and
    /// exit.
    #[arg(long)]
    pub print_config: bool,
    #[command(flatten)]
    pub recipe: RecipeArgs,
}

#[derive(Debug, Args)]
pub struct AnnounceArgs {
    /// Job ID, or a unique prefix of one (default: every recent job with pending
    /// announcements).
    pub job: Option<String>,
    /// Where to: as for `work --announce` (TILEGATE_ANNOUNCE).
    #[arg(
        long = "announce",
        value_name = "SINK",
        env = "TILEGATE_ANNOUNCE",
        value_delimiter = ',',
        required = true
    )]
    pub announce: Vec<tilegate_core::announce::SinkSpec>,
    /// How many of the newest jobs to look at without a JOB.
    #[arg(long, default_value_t = 1000)]
    pub limit: usize,
}

#[derive(Debug, Args)]
pub struct RepairArgs {
    /// Job ID, or a unique prefix of one.
    pub job: String,
    /// The window, as ROW_COL counted from 0 at the top left (e.g. 3_12 or 0003_0012).
    #[arg(long)]
    pub window: String,
}

#[derive(Debug, Args)]
pub struct BackfillArgs {
    /// Job ID, or a unique prefix of one.
    pub job: String,
    /// Only windows with no manifest row.
    #[arg(long)]
    pub missing: bool,
}

#[derive(Debug, Args)]
pub struct CleanupArgs {
    /// Abort uploads initiated more than this many seconds ago.
    #[arg(long, default_value_t = 3600)]
    pub older_than_s: u64,
}

/// A duration such as `90s`, `15m`, `6h` or `7d`. One too long to count in seconds is refused
/// by name (`duration-out-of-range`), never saturated or wrapped.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let out_of_range = || format!("duration-out-of-range: `{s}` is longer than a duration can be");
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().map_err(|e: std::num::ParseIntError| {
        if *e.kind() == std::num::IntErrorKind::PosOverflow {
            out_of_range()
        } else {
            format!("`{s}` is not a duration: expected e.g. 90s, 15m, 6h or 7d")
        }
    })?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("`{s}`: the unit must be s, m, h or d")),
    };
    n.checked_mul(secs)
        .map(std::time::Duration::from_secs)
        .ok_or_else(out_of_range)
}

/// The longest a signed URL lives: S3's SigV4 and GCS's V4 signatures cannot live longer, and
/// the Azure store holds its SAS to the same.
pub const MAX_URL_LIFETIME: std::time::Duration = std::time::Duration::from_secs(7 * 86_400);

/// A signed URL's lifetime ([`parse_duration`]): more than none, at most [`MAX_URL_LIFETIME`].
/// A longer one is refused by name (`url-lifetime-exceeded`), not quietly shortened: no store
/// could sign it.
pub fn parse_url_lifetime(s: &str) -> Result<std::time::Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!(
            "url-lifetime-empty: a URL valid for `{s}` reads nothing"
        ));
    }
    if d > MAX_URL_LIFETIME {
        return Err(format!(
            "url-lifetime-exceeded: a signed URL lives at most 7d (S3's and GCS's signatures \
             cannot live longer, and Azure's are held to the same), not `{s}`"
        ));
    }
    Ok(d)
}

/// One window of a job, or its scene.
#[derive(Debug, Args)]
pub struct WindowRef {
    /// Job ID, or a unique prefix of one.
    pub job: String,
    /// The window, as ROW_COL counted from 0 at the top left (e.g. 3_12 or 0003_0012).
    #[arg(long, required_unless_present = "scene")]
    pub window: Option<String>,
    /// The job's scene instead of a window.
    #[arg(long, conflicts_with = "window")]
    pub scene: bool,
}

#[derive(Debug, Args)]
pub struct RegenerateArgs {
    #[command(flatten)]
    pub at: WindowRef,
    /// Continue this attempt (a retry after a failure) instead of making a new one.
    #[arg(long, value_name = "ATTEMPT_ID")]
    pub attempt: Option<String>,
    /// A preview: delete it this long after it was made (e.g. 6h), published or not.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub retain: Option<std::time::Duration>,
    /// Keep the attempt this long after a newer one replaces it.
    #[arg(long, value_parser = parse_duration, default_value = "7d", value_name = "DURATION")]
    pub keep_retired: std::time::Duration,
    /// An upload younger than this is presumed alive by `gc`: make it longer than the longest
    /// upload.
    #[arg(long, value_parser = parse_duration, default_value = "6h", value_name = "DURATION")]
    pub upload_grace: std::time::Duration,
    /// Upload only; publish later with `accept`.
    #[arg(long)]
    pub no_accept: bool,
    /// Send the attempt to the work queue for a worker instead of producing it here
    /// (windows only).
    #[arg(long, conflicts_with = "scene")]
    pub enqueue: bool,
    /// How a regenerated scene is built and published.
    #[command(flatten)]
    pub assemble: AssembleFlags,
}

#[derive(Debug, Args)]
pub struct AcceptArgs {
    #[command(flatten)]
    pub at: WindowRef,
    /// The attempt to publish.
    #[arg(long, value_name = "ATTEMPT_ID")]
    pub attempt: String,
    /// Move the pointer only if it is still at this attempt (`none`: no pointer yet); by
    /// default, wherever it is when read.
    #[arg(long, value_name = "ATTEMPT_ID|none")]
    pub seen: Option<String>,
}

#[derive(Debug, Args)]
pub struct AttemptsArgs {
    /// Job ID, or a unique prefix of one (default: the newest job).
    pub job: Option<String>,
}

#[derive(Debug, Args)]
pub struct HoldArgs {
    #[command(flatten)]
    pub at: WindowRef,
    #[arg(long, value_name = "ATTEMPT_ID")]
    pub attempt: String,
    /// Release the hold instead of setting it.
    #[arg(long)]
    pub release: bool,
}

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Report what would be deleted; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also print the pass's figures and `deletion_overdue_oldest_seconds` as one CloudWatch
    /// Embedded Metric Format line on stdout (for a scheduled GC whose output CloudWatch reads).
    #[arg(long)]
    pub emf: bool,
    /// Test hook: judge deadlines at this time (ms since the epoch).
    #[arg(long, hide = true)]
    pub test_now_ms: Option<i64>,
}

#[derive(Debug, Args)]
pub struct ReconcileJobsArgs {
    /// One pass, then exit.
    #[arg(long, conflicts_with = "every", required_unless_present = "every")]
    pub once: bool,
    /// Seconds between passes; passes until stopped (Ctrl-C / SIGTERM).
    #[arg(long, value_name = "SECONDS")]
    pub every: Option<f64>,
    /// Seconds a job's planner has to enqueue its windows before the reconciler does.
    #[arg(long, default_value_t = 120.0, value_name = "SECONDS")]
    pub grace: f64,
    /// Open jobs looked at per pass, oldest first.
    #[arg(long, default_value_t = 1000)]
    pub limit: usize,
    /// Jobs whose pending announcements are delivered per pass.
    #[arg(long, default_value_t = 100)]
    pub deliveries: usize,
    /// Assemble only jobs whose tiles total at most this many bytes (larger ones are left to
    /// a host that can take them, and named stalled).
    #[arg(long, value_name = "BYTES")]
    pub max_assemble_bytes: Option<u64>,
    #[command(flatten)]
    pub flags: AssembleFlags,
}

#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// Job ID, or a unique prefix of one (default: the newest job).
    pub job: Option<String>,
}

#[derive(Debug, Args)]
pub struct UrlArgs {
    #[command(flatten)]
    pub at: WindowRef,
    /// The tenant asking; it must own the job.
    #[arg(long, default_value = "default", env = "TILEGATE_TENANT")]
    pub tenant: String,
    /// How long the URL works: at most 7d, and never past the attempt's retention.
    #[arg(long, value_parser = parse_url_lifetime, default_value = "15m", value_name = "DURATION")]
    pub expires: std::time::Duration,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Job ID, or a unique prefix of one (default: the newest job).
    pub job: Option<String>,
    /// Follow the job live (windows done and missing, rate, ETA, dead letters, workers) until
    /// it completes; plain lines when stdout is not a terminal. Exits 0 when the job is
    /// complete, 3 when what is left can only be dead letters.
    #[arg(long)]
    pub watch: bool,
    /// Seconds between refreshes with --watch.
    #[arg(long, default_value_t = 2.0, value_name = "SECONDS")]
    pub interval: f64,
    /// Show the job's requests by service and operation and their estimated cost.
    #[arg(long)]
    pub cost: bool,
    #[command(flatten)]
    pub prices: PriceArgs,
}

#[derive(Debug, Args)]
pub struct PriceArgs {
    /// A price table (TOML) for cost estimates; default: the built-in table, whose prices and
    /// their date are printed by `--print-prices`.
    #[arg(long, env = "TILEGATE_PRICES", value_name = "FILE")]
    pub prices: Option<PathBuf>,
    /// Print the built-in price table (a starting point for --prices) and exit.
    #[arg(long)]
    pub print_prices: bool,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Job ID, or a unique prefix of one (default: the newest job).
    pub job: Option<String>,
    /// Where to write the page (`-`: to standard output, and nothing else there).
    #[arg(short, long, default_value = "report.html", value_name = "FILE")]
    pub out: PathBuf,
    /// Leave the scene's thumbnail out (it is read from the scene's smallest overview).
    #[arg(long)]
    pub no_thumbnail: bool,
    #[command(flatten)]
    pub prices: PriceArgs,
}

#[derive(Debug, Args)]
pub struct StacArgs {
    /// Job IDs or unique prefixes (default: every job with an assembled scene, newest first).
    pub jobs: Vec<String>,
    /// Also write a STAC Collection linking the Items, to this file.
    #[arg(long, value_name = "FILE")]
    pub stac_collection: Option<PathBuf>,
    /// The Collection's id.
    #[arg(long, default_value = "tilegate-scenes")]
    pub collection_id: String,
    /// Print where each Item is stored (a path or URL a line) instead of the Items.
    #[arg(long)]
    pub hrefs: bool,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where the map page's packages are installed (`npm ci --prefix web` makes
    /// `web/node_modules`: MapLibre GL JS and the PMTiles reader, served at `/v1/assets/`).
    /// Default: `web/node_modules` here, else the one beside this build's sources.
    #[arg(long, env = "TILEGATE_WEB_ASSETS", value_name = "DIR")]
    pub web_assets: Option<PathBuf>,
    /// Where to listen (`127.0.0.1:0`: any free port, printed once bound).
    #[arg(
        long,
        env = "TILEGATE_LISTEN",
        default_value = "127.0.0.1:8080",
        value_name = "ADDR"
    )]
    pub listen: String,
    /// Accept OIDC tokens signed by the keys of this JWKS (a file, or an https:// URL fetched
    /// at start and again when a token names an unknown key). Needs --jwt-issuer and
    /// --jwt-audience. Without it, only API keys are accepted.
    #[arg(long, env = "TILEGATE_JWKS", value_name = "FILE|URL", requires_all = ["jwt_issuer", "jwt_audience"])]
    pub jwks: Option<String>,
    /// The `iss` a token must carry.
    #[arg(long, env = "TILEGATE_JWT_ISSUER", value_name = "ISSUER")]
    pub jwt_issuer: Option<String>,
    /// The `aud` a token must carry.
    #[arg(long, env = "TILEGATE_JWT_AUDIENCE", value_name = "AUDIENCE")]
    pub jwt_audience: Option<String>,
    /// The token claim whose value is the caller's tenant.
    #[arg(
        long,
        env = "TILEGATE_TENANT_CLAIM",
        default_value = "tenant",
        value_name = "CLAIM"
    )]
    pub tenant_claim: String,
    /// The token claim whose value `operator` lets the caller see every tenant's jobs.
    #[arg(
        long,
        env = "TILEGATE_ROLE_CLAIM",
        default_value = "tilegate_role",
        value_name = "CLAIM"
    )]
    pub role_claim: String,
    /// Requests a second per tenant, per server process (bursts of two seconds' worth); 0:
    /// unlimited. Over it: 429 `rate-limited` with Retry-After.
    #[arg(
        long,
        env = "TILEGATE_RATE_LIMIT",
        default_value_t = 20.0,
        value_name = "PER_SECOND"
    )]
    pub rate_limit: f64,
    /// A tenant's unpublished jobs, at most; a new job beyond it is refused with 429
    /// `too-many-jobs-in-flight`.
    #[arg(
        long,
        env = "TILEGATE_MAX_JOBS_IN_FLIGHT",
        default_value_t = 10,
        value_name = "N"
    )]
    pub max_jobs_in_flight: usize,
    /// Longest wait for a response to start (planning reads the source).
    #[arg(long, env = "TILEGATE_REQUEST_TIMEOUT", value_parser = parse_duration, default_value = "60s", value_name = "DURATION")]
    pub request_timeout: std::time::Duration,
    /// Longest event stream; clients reconnect.
    #[arg(long, value_parser = parse_duration, default_value = "5m", value_name = "DURATION")]
    pub max_stream: std::time::Duration,
    /// A tenant's event streams open at once, per server process; one more is refused with
    /// 429 `too-many-streams`. Each look a stream takes is one of the tenant's requests.
    #[arg(
        long,
        env = "TILEGATE_MAX_STREAMS_PER_TENANT",
        default_value_t = 8,
        value_name = "N"
    )]
    pub max_streams_per_tenant: usize,
    /// Print the OpenAPI document and exit.
    #[arg(long)]
    pub print_openapi: bool,
    /// Try the service on one machine: a sample scene served at /demo/scene.tif (made in the
    /// data directory if absent), a worker pool and the assembler in this process, and a new
    /// key for the tenant `demo`, which may read that scene; prints the page's link with the
    /// key. The demo tenant's policy admits this server's own address; other tenants keep the
    /// default policy.
    #[arg(long)]
    pub demo: bool,
    /// Where clients reach this server (`https://tiles.example.com`), for the links it signs
    /// itself on the embedded store (`POST /v1/jobs/{id}/urls`); default `http://ADDR`, the
    /// address bound.
    #[arg(long, env = "TILEGATE_PUBLIC_URL", value_name = "URL")]
    pub public_url: Option<String>,
    #[command(flatten)]
    pub prices: PriceArgs,
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Make an API key for a tenant. The key is printed once; only its SHA-256 is stored.
    Create {
        /// The tenant whose jobs the key reaches (`[A-Za-z0-9._-]`).
        #[arg(long)]
        tenant: String,
        /// Let the key see every tenant's jobs.
        #[arg(long)]
        operator: bool,
        /// A note for `keys list` (who holds it, what for).
        #[arg(long, default_value = "")]
        label: String,
    },
    /// List the keys: ID, tenant, role, label, when made and revoked (never a secret).
    List,
    /// Revoke a key for good (within a request: every request reads revocations).
    Revoke {
        /// The key's ID (the 16 hex digits after `tgk_`).
        key_id: String,
    },
    /// Make a new key for the same tenant, role and label, then revoke the old one.
    Rotate {
        /// The key's ID (the 16 hex digits after `tgk_`).
        key_id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// List dead letters with their job, window and reason.
    List {
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Only this job's (a full ID or a unique prefix).
        #[arg(long)]
        job: Option<String>,
    },
    /// Return dead letters to the work queue with a fresh receive count.
    Redrive {
        /// Only these message IDs (default: all).
        #[arg(long = "id")]
        ids: Vec<String>,
        /// Only this job's (a full ID or a unique prefix).
        #[arg(long, conflicts_with = "ids")]
        job: Option<String>,
    },
    /// Delete dead letters for good: an abandoned job's (`--job`), or those named (`--id`).
    /// Nothing is redriven; their windows stay missing. `dlq list --job` shows them first.
    #[command(group(clap::ArgGroup::new("which").required(true).args(["ids", "job"])))]
    Purge {
        /// These message IDs.
        #[arg(long = "id")]
        ids: Vec<String>,
        /// Every dead letter of this job (a full ID or a unique prefix).
        #[arg(long, conflicts_with = "ids")]
        job: Option<String>,
    },
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Sample scene size in pixels.
    #[arg(long, default_value_t = 4096)]
    pub size: u32,
    #[command(flatten)]
    pub pool: PoolArgs,
    #[command(flatten)]
    pub assemble: AssembleFlags,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Also create the bucket named by --objects (otherwise it must exist).
    #[arg(long)]
    pub create_bucket: bool,
    /// Also create `ingest`'s arrivals queue and its dead-letter queue (`sqs://queue-name`).
    #[arg(long, env = "TILEGATE_ARRIVALS", value_name = "URL")]
    pub arrivals: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn durations_never_saturate_or_panic() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(604_800)));
        assert_eq!(
            parse_duration("213503982334601d"),
            Ok(Duration::from_secs(213_503_982_334_601 * 86_400))
        );
        for too_long in [
            "213503982334602d",
            "99999999999999999999d",
            "18446744073709551616s",
        ] {
            let e = parse_duration(too_long).unwrap_err();
            assert!(e.starts_with("duration-out-of-range:"), "{too_long}: {e}");
        }
        for bad in ["", "d", "7", "7w", "-1d", "1.5h", " 7d"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(!e.contains("out-of-range"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn a_url_lives_more_than_nothing_and_at_most_seven_days() {
        assert_eq!(parse_url_lifetime("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_url_lifetime("7d"), Ok(MAX_URL_LIFETIME));
        assert_eq!(parse_url_lifetime("604800s"), Ok(MAX_URL_LIFETIME));
        for (asked, name) in [
            ("604801s", "url-lifetime-exceeded"),
            ("8d", "url-lifetime-exceeded"),
            ("36500d", "url-lifetime-exceeded"),
            ("0s", "url-lifetime-empty"),
            ("0d", "url-lifetime-empty"),
            ("99999999999999999999d", "duration-out-of-range"),
        ] {
            let e = parse_url_lifetime(asked).unwrap_err();
            assert!(e.starts_with(&format!("{name}:")), "{asked}: {e}");
        }
    }
}

/// `product`: many scenes made into one raster per tile of a grid.
#[derive(Debug, Subcommand)]
pub enum ProductCommand {
    /// Add scenes to a product and plan every tile they touch over all of its scenes: one job
    /// per tile (a COG per tile, worked by `work` like any job), whose identity is the tile,
    /// the recipe and its input scenes — a tile whose scenes did not change plans nothing new,
    /// and one that gained a scene gets a new job (a new, immutable output). The first plan of
    /// a product fixes its grid, recipe and resampling; later plans must say the same.
    ///
    ///   tilegate product plan alps --grid utm:100km@10m --recipe composite --stat median \
    ///       --from scenes.txt
    ///   tilegate product plan alps --grid utm:100km@10m --recipe composite --stat median \
    ///       new-scene.tif                   # one more: only the tiles it touches change
    ///   tilegate work --assemble --until-empty
    #[command(verbatim_doc_comment)]
    Plan(ProductPlanArgs),
    /// Write the indexes others serve a product with, from its tiles' pointers as they are
    /// now: a STAC Collection over the tiles' Items, a MosaicJSON document (titiler,
    /// cogeo-mosaic) and a GDAL VRT per CRS of the grid (a UTM grid: one per zone), under
    /// PREFIX/products/NAME/. Run it after the tiles are assembled; it rewrites them whole.
    ///
    ///   tilegate product index alps
    ///   gdalinfo tilegate/products/alps/index-32N.vrt
    #[command(verbatim_doc_comment)]
    Index(ProductIndexArgs),
}

#[derive(Debug, Args)]
pub struct ProductIndexArgs {
    /// The product's name.
    pub name: String,
    /// Output key prefix the product was planned under.
    #[arg(long, default_value = "tilegate")]
    pub prefix: String,
    /// Whose product it is (see `plan --tenant`).
    #[arg(long, default_value = "default", env = "TILEGATE_TENANT")]
    pub tenant: String,
}

#[derive(Debug, Args)]
pub struct ProductPlanArgs {
    /// The product's name: 1 to 64 of a-z, 0-9, `-` and `_`.
    pub name: String,
    /// Scenes to add: paths, URIs or STAC Items. None (and no --from): the product is only
    /// defined, for `ingest --product` to add arrivals to.
    #[arg(value_name = "SCENE")]
    pub scenes: Vec<String>,
    /// More scenes to add: a file listing one per line (paths, URIs or STAC Items; blank lines
    /// and `#` comments skipped), a STAC ItemCollection (.json), or a directory (its
    /// .tif/.tiff files); `-` reads a list from stdin.
    #[arg(long, value_name = "LIST|DIR|ITEMS.json")]
    pub from: Option<String>,
    /// The tile grid: `utm:SIZE@RES` — square tiles of SIZE at RES per pixel (m or km), each in
    /// its UTM zone's CRS (EPSG:326zz/327zz), on multiples of SIZE. E.g. `utm:100km@10m`.
    #[arg(long, value_name = "GRID")]
    pub grid: String,
    /// `mosaic` (the first valid pixel, in --order) or `composite` (a per-pixel --stat over
    /// every valid observation).
    #[arg(long, value_name = "RECIPE")]
    pub recipe: String,
    /// `mosaic`: which scene's pixel wins — `newest`, `oldest` or `least-cloud` (a scene's
    /// `eo:cloud_cover`, `CLOUD_COVER` or `CLOUDY_PIXEL_PERCENTAGE` metadata). Ties, and scenes
    /// without the value, go by scene identity, after those with it.
    #[arg(long, default_value = "newest", value_name = "ORDER")]
    pub order: String,
    /// `composite`: `median`, `mean`, `min`, `max`, `count` (valid observations, UInt16) or a
    /// percentile `p10`…`p90` (NumPy's linear interpolation). Every statistic but `count` is
    /// Float32, NaN where no scene observed the pixel.
    #[arg(long, default_value = "median", value_name = "STAT")]
    pub stat: String,
    /// GDAL resampling onto the tile's grid. `near` (the default) is exact: every pixel a
    /// source pixel, a scene's mask (nodata, per-dataset mask, alpha) honoured pixel by pixel.
    #[arg(long, default_value = "near", value_name = "METHOD")]
    pub resampling: String,
    /// Tile compression: deflate, zstd or lzw.
    #[arg(long, default_value = "deflate")]
    pub compress: String,
    /// Window and COG block size in pixels (a multiple of 16, at most 8192).
    #[arg(long, default_value_t = 512)]
    pub window: u32,
    /// Output key prefix: segments of [A-Za-z0-9._-] joined by `/`.
    #[arg(long, default_value = "tilegate")]
    pub prefix: String,
    /// Whose product it is (see `plan --tenant`).
    #[arg(long, default_value = "default", env = "TILEGATE_TENANT")]
    pub tenant: String,
}
