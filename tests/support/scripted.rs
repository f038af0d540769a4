//! [`ScriptedStore`]: a real object store under a [`StoreScript`] that injects faults and lost
//! answers.

use bytes::Bytes;
use std::time::SystemTime;
use tilegate_core::object::{
    DeleteOptions, DeleteOutcome, GetOptions, GetOutcome, MultipartUpload, ObjectMeta, ObjectStore,
    PartId, PutMode, PutOptions, PutOutcome,
};
use tilegate_core::{ObjectKey, StoreResult};

/// What a [`ScriptedStore`] does to the calls it passes on to the real store beneath it: the
/// faults and lost answers the tests inject.
pub trait StoreScript: Send + Sync + std::fmt::Debug {
    /// Before a write — `put`, `create multipart`, `upload part`, `delete` — reaches the store: an
    /// error answers the call instead.
    fn before_write(&self, _operation: &'static str, _key: &str) -> StoreResult<()> {
        Ok(())
    }
    /// What a put that reached the store answers (the store's own answer by default).
    fn answer_put(&self, _mode: &PutMode, answer: PutOutcome) -> PutOutcome {
        answer
    }
}

/// A real object store under a [`StoreScript`].
#[derive(Debug)]
pub struct ScriptedStore<S> {
    pub inner: std::sync::Arc<dyn ObjectStore>,
    pub script: S,
}

#[async_trait::async_trait]
impl<S: StoreScript> ObjectStore for ScriptedStore<S> {
    fn name(&self) -> &'static str {
        "scripted"
    }
    async fn head(&self, key: &ObjectKey) -> StoreResult<Option<ObjectMeta>> {
        self.inner.head(key).await
    }
    async fn get_opts(&self, key: &ObjectKey, opts: GetOptions) -> StoreResult<GetOutcome> {
        self.inner.get_opts(key, opts).await
    }
    async fn put_opts(
        &self,
        key: &ObjectKey,
        bytes: Bytes,
        opts: PutOptions,
    ) -> StoreResult<PutOutcome> {
        self.script.before_write("put", key)?;
        let mode = opts.mode.clone();
        let answer = self.inner.put_opts(key, bytes, opts).await?;
        Ok(self.script.answer_put(&mode, answer))
    }
    async fn delete_opts(
        &self,
        key: &ObjectKey,
        opts: DeleteOptions,
    ) -> StoreResult<DeleteOutcome> {
        self.script.before_write("delete", key)?;
        self.inner.delete_opts(key, opts).await
    }
    async fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectMeta>> {
        self.inner.list(prefix).await
    }
    async fn create_multipart(&self, key: &ObjectKey, opts: &PutOptions) -> StoreResult<String> {
        self.script.before_write("create multipart", key)?;
        self.inner.create_multipart(key, opts).await
    }
    async fn upload_part(
        &self,
        key: &ObjectKey,
        id: &str,
        n: u32,
        bytes: Bytes,
    ) -> StoreResult<PartId> {
        self.script.before_write("upload part", key)?;
        self.inner.upload_part(key, id, n, bytes).await
    }
    async fn complete_multipart(
        &self,
        key: &ObjectKey,
        id: &str,
        parts: &[PartId],
        mode: &PutMode,
    ) -> StoreResult<PutOutcome> {
        self.inner.complete_multipart(key, id, parts, mode).await
    }
    async fn abort_multipart(&self, key: &ObjectKey, id: &str) -> StoreResult<()> {
        self.inner.abort_multipart(key, id).await
    }
    async fn list_multipart(
        &self,
        prefix: &str,
        older_than: Option<SystemTime>,
    ) -> StoreResult<Vec<MultipartUpload>> {
        self.inner.list_multipart(prefix, older_than).await
    }
}
