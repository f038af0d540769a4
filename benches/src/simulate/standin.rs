//! The encoder stand-in: the worker's real handling around a timed encode. Each window's
//! encode time is drawn from the measured distribution, and whether the worker crashes during
//! it, from a hash of (seed, window, receive), so the draws do not depend on which worker gets
//! the window. The bytes are a real COG tile of the window's size (encoded once per size from
//! the simulated scene), so the real assembler can lay them out.

use super::model::{Latency, hashed_unit};
use async_trait::async_trait;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tilegate_core::grid::Window;
use tilegate_core::table::JobRecord;
use tilegate_worker::StandInEncoder;
use tokio::sync::Notify;

/// Salts that keep the encode-time and crash draws independent.
const TIME_SALT: u64 = 0x5eed_0001;
const CRASH_SALT: u64 = 0x5eed_0002;

/// A real tile for each window size (width, height).
/// Shared, never copied: every window of a size stores the same bytes.
pub type Tiles = HashMap<(u32, u32), Bytes>;

#[derive(Debug)]
pub struct StandIn {
    pub tiles: Arc<Tiles>,
    pub seed: u64,
    pub encode: Latency,
    /// Chance that the worker crashes while encoding a window (per receive).
    pub crash_rate: f64,
    /// Told when this worker should crash; its supervisor aborts it.
    pub crash: Arc<Notify>,
    /// Encodes begun (crashed ones included).
    pub encodes: Arc<AtomicU64>,
}

fn key(w: Window, attempt: u32) -> [u64; 3] {
    [u64::from(w.row), u64::from(w.col), u64::from(attempt)]
}

/// A standard normal draw for `key` (Box–Muller over two hashed uniforms).
fn hashed_normal(seed: u64, key: &[u64]) -> f64 {
    let u1 = hashed_unit(seed, key).max(f64::MIN_POSITIVE);
    let u2 = hashed_unit(seed ^ 0x9e37_79b9, key);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

#[async_trait]
impl StandInEncoder for StandIn {
    async fn encode(&self, job: &JobRecord, window: Window, attempt: u32) -> Result<Bytes, String> {
        self.encodes.fetch_add(1, Ordering::Relaxed);
        let k = key(window, attempt);
        let took = self.encode.draw(hashed_normal(self.seed ^ TIME_SALT, &k));
        if hashed_unit(self.seed ^ CRASH_SALT, &k) < self.crash_rate {
            // Half-way through the encode the process dies: nothing is written, acknowledged
            // or extended any more.
            tokio::time::sleep(took / 2).await;
            self.crash.notify_one();
            return std::future::pending().await;
        }
        tokio::time::sleep(took).await;
        let rect = job
            .grid
            .rect(window)
            .ok_or_else(|| format!("window {window} is outside the grid"))?;
        self.tiles
            .get(&(rect.width, rect.height))
            .cloned()
            .ok_or_else(|| format!("no stand-in tile of {}×{}", rect.width, rect.height))
    }
}
