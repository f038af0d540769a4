//! Running the backends' blocking work (file I/O, SQLite) off the async runtime.

use tilegate_core::{Retry, StoreError, StoreResult};

/// Run `f` on tokio's blocking pool. A panic inside `f` is re-raised in the caller (it is a bug,
/// not a storage fault); a task cancelled because the runtime is shutting down is retryable.
pub(crate) async fn run<T, F>(operation: &'static str, key: &str, f: F) -> StoreResult<T>
where
    T: Send + 'static,
    F: FnOnce() -> StoreResult<T> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(out) => out,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(StoreError::backend(operation, key, Retry::Retryable, e)),
    }
}
