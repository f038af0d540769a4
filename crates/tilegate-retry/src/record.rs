//! Upload IDs for the stores that cannot list their own uploads in progress (GCS sessions,
//! Azure block lists) and so record each one under `.tilegate/uploads/<id>`: the ID carries
//! its initiation time, so a cleanup can filter by age before reading a record.

use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tilegate_core::StoreError;

/// The first key segment such a store keeps for itself (no [`tilegate_core::ObjectKey`] starts
/// with it).
pub const RESERVED: &str = tilegate_core::keys::STORE_RESERVED;
/// Where, under the store's prefix, its upload records live.
pub const RECORDS: &str = ".tilegate/uploads/";

/// The key (under the store's prefix) of upload `id`'s record.
pub fn record_key(id: &str) -> String {
    format!("{RECORDS}{id}")
}

/// A new upload ID: the initiation time in milliseconds (13 digits), `-`, 32 hex digits.
pub fn upload_id() -> String {
    format!(
        "{:013}-{}",
        tilegate_core::now_millis(),
        uuid::Uuid::new_v4().simple()
    )
}

/// The parts of an upload ID made by [`upload_id`]: its initiation time (ms since the epoch)
/// and its random part.
pub fn parse_upload_id(id: &str) -> Option<(u64, &str)> {
    let (ms, nonce) = id.split_once('-')?;
    let valid = ms.len() == 13
        && ms.bytes().all(|b| b.is_ascii_digit())
        && nonce.len() == 32
        && nonce.bytes().all(|b| b.is_ascii_hexdigit());
    valid.then(|| (ms.parse().unwrap_or(0), nonce))
}

/// When an upload whose ID says `ms` was initiated.
pub fn initiated_at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// The contract's error for an upload that is not (or no longer) there.
pub fn no_upload(key: &str) -> StoreError {
    StoreError::NotFound {
        what: "multipart upload",
        key: key.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_object_key_names_the_records() {
        let key = |k| tilegate_core::ObjectKey::checked(k);
        let record = record_key("1-a");
        assert!(key(&record).is_err());
        assert!(key("a/.tilegate").is_ok());
        assert!(key("a/../b").is_err());
        assert_eq!(record_key("1-a"), ".tilegate/uploads/1-a");
    }

    #[test]
    fn an_upload_id_carries_its_initiation_time() {
        let before = SystemTime::now() - Duration::from_millis(1);
        let id = upload_id();
        let (ms, nonce) = parse_upload_id(&id).unwrap();
        let at = initiated_at(ms);
        assert!(at >= before && at <= SystemTime::now(), "{id}");
        assert_eq!(nonce.len(), 32);
        for bad in [
            "",
            "x-y",
            "0000000000000-xyz",
            "1-0123456789abcdef0123456789abcdef",
        ] {
            assert!(parse_upload_id(bad).is_none(), "{bad}");
        }
    }
}
