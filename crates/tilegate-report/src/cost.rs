//! What a job cost: the requests its stores counted (`requests_total{service,op}` and the byte
//! counters, added per job like every counter) times a price table that is configuration — a
//! TOML file whose defaults ([`PriceTable::default`], `prices.toml`) are documented and dated.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tilegate_core::metrics::{self as m, split_labels};

/// The default price table's text.
pub const DEFAULT_PRICES: &str = include_str!("prices.toml");

/// Prices per request by service and operation, storage and transfer.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PriceTable {
    /// When the prices were read off the providers' pages.
    pub date: String,
    pub currency: String,
    pub storage_per_gb_month: f64,
    pub transfer_per_gb: f64,
    pub services: BTreeMap<String, ServicePrices>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServicePrices {
    /// The price of any operation not listed.
    pub default: f64,
    #[serde(default)]
    pub ops: BTreeMap<String, f64>,
}

/// A price table that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("read the price table")]
pub struct PriceTableError(#[from] toml::de::Error);

impl Default for PriceTable {
    fn default() -> Self {
        Self::parse(DEFAULT_PRICES).expect("the default price table parses")
    }
}

impl PriceTable {
    pub fn parse(text: &str) -> Result<Self, PriceTableError> {
        Ok(toml::from_str(text)?)
    }

    /// The price of one request, or `None` for a service the table does not know.
    pub fn per_request(&self, service: &str, op: &str) -> Option<f64> {
        let s = self.services.get(service)?;
        Some(s.ops.get(op).copied().unwrap_or(s.default))
    }
}

/// One (service, operation) line of an estimate.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct CostLine {
    pub service: String,
    pub op: String,
    pub requests: u64,
    /// `None` where the price table has no such service (not priced, not in the total).
    #[serde(serialize_with = "money_opt")]
    pub usd_per_request: Option<f64>,
    #[serde(serialize_with = "money")]
    pub usd: f64,
}

/// An amount of money as the JSON carries it: to the pico-dollar (summed floats carry noise
/// like `0.000025040767000000002`), and never `-0.0`.
fn rounded(v: f64) -> f64 {
    let r = (v * 1e12).round() / 1e12;
    if r == 0.0 { 0.0 } else { r }
}

fn money<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(rounded(*v))
}

fn money_opt<S: serde::Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_some(&rounded(*v)),
        None => s.serialize_none(),
    }
}

/// A job's cost, from its counted requests and stored bytes.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct CostEstimate {
    pub price_table_date: String,
    pub currency: String,
    pub lines: Vec<CostLine>,
    /// Requests by service, every operation summed.
    pub requests_by_service: BTreeMap<String, u64>,
    pub requests: u64,
    #[serde(serialize_with = "money")]
    pub requests_usd: f64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    #[serde(serialize_with = "money")]
    pub transfer_usd: f64,
    /// Bytes of the job's outputs (tiles in the manifest, and the scene).
    pub stored_bytes: u64,
    #[serde(serialize_with = "money")]
    pub storage_usd_per_month: f64,
    /// Requests and transfer (storage is per month, apart).
    #[serde(serialize_with = "money")]
    pub total_usd: f64,
    pub windows: u64,
    #[serde(serialize_with = "money")]
    pub per_window_usd: f64,
}

/// Requests by (service, operation) from a job's counters.
pub fn requests(counters: &BTreeMap<String, u64>) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    for (name, v) in counters {
        let (base, labels) = split_labels(name);
        if base != m::REQUESTS {
            continue;
        }
        let label = |k: &str| {
            labels
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        };
        if let (Some(service), Some(op)) = (label("service"), label("op")) {
            *out.entry((service, op)).or_default() += v;
        }
    }
    out
}

fn sum_of(counters: &BTreeMap<String, u64>, base: &str) -> u64 {
    counters
        .iter()
        .filter(|(k, _)| split_labels(k).0 == base)
        .map(|(_, v)| v)
        .sum()
}

/// The estimate for a job's counters, outputs of `stored_bytes`, over `windows` windows.
pub fn estimate(
    counters: &BTreeMap<String, u64>,
    stored_bytes: u64,
    windows: u64,
    prices: &PriceTable,
) -> CostEstimate {
    let mut lines = Vec::new();
    let mut requests_by_service: BTreeMap<String, u64> = BTreeMap::new();
    for ((service, op), n) in requests(counters) {
        let price = prices.per_request(&service, &op);
        *requests_by_service.entry(service.clone()).or_default() += n;
        lines.push(CostLine {
            usd: price.unwrap_or(0.0) * n as f64,
            service,
            op,
            requests: n,
            usd_per_request: price,
        });
    }
    let gb = |b: u64| b as f64 / 1e9;
    let bytes_sent = sum_of(counters, m::BYTES_SENT);
    let bytes_received = sum_of(counters, m::BYTES_RECEIVED);
    let requests_usd: f64 = lines.iter().map(|l| l.usd).sum();
    let transfer_usd = gb(bytes_received) * prices.transfer_per_gb;
    let total_usd = requests_usd + transfer_usd;
    CostEstimate {
        price_table_date: prices.date.clone(),
        currency: prices.currency.clone(),
        requests: lines.iter().map(|l| l.requests).sum(),
        lines,
        requests_by_service,
        requests_usd,
        bytes_sent,
        bytes_received,
        transfer_usd,
        stored_bytes,
        storage_usd_per_month: gb(stored_bytes) * prices.storage_per_gb_month,
        total_usd,
        windows,
        per_window_usd: if windows > 0 {
            total_usd / windows as f64
        } else {
            0.0
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_table_parses_and_prices_what_is_counted() {
        let p = PriceTable::default();
        assert_eq!(p.per_request("s3", "PutObject"), Some(0.000005));
        assert_eq!(p.per_request("s3", "HeadObject"), Some(0.0000004));
        assert_eq!(p.per_request("dynamodb", "UpdateItem"), Some(0.000000625));
        assert_eq!(p.per_request("nowhere", "x"), None);
        let mut c = BTreeMap::new();
        c.insert(m::requests_by("s3", "PutObject"), 400);
        c.insert(m::requests_by("s3", "HeadObject"), 1000);
        c.insert(m::requests_by("sqs", "ReceiveMessage"), 41);
        c.insert(m::bytes_sent_by("s3"), 5_000_000);
        c.insert(m::TILES_WRITTEN.to_owned(), 400);
        let e = estimate(&c, 2_000_000_000, 400, &p);
        assert_eq!(e.requests, 1441);
        assert_eq!(e.requests_by_service["s3"], 1400);
        assert_eq!(e.bytes_sent, 5_000_000);
        let want = 400.0 * 0.000005 + 1000.0 * 0.0000004 + 41.0 * 0.0000004;
        assert!((e.total_usd - want).abs() < 1e-12, "{}", e.total_usd);
        assert!((e.storage_usd_per_month - 2.0 * 0.023).abs() < 1e-12);
        assert!((e.per_window_usd - want / 400.0).abs() < 1e-15);
    }

    #[test]
    fn a_table_with_an_unknown_field_is_refused() {
        let bad = DEFAULT_PRICES.replace("currency = \"USD\"", "currency = \"USD\"\ncurency = 1");
        assert!(PriceTable::parse(&bad).is_err());
    }
}
