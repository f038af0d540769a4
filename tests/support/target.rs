//! [`Target`]: the backend a pipeline test runs `tilegate` on — embedded, AWS on the emulator,
//! or a cloud object store.

use crate::support::emulators::{azure_container, azure_emulator, emulator_configured, unique};
use crate::{Aws, json_of, tempdir, tilegate_bin};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// Where a pipeline test runs the `tilegate` binary: the embedded backend of a data
/// directory, or AWS on the emulator.
#[derive(Debug, Clone)]
pub enum Target {
    Embedded,
    Aws(Aws),
    /// Objects at a cloud store's URL (`gs://…`, `az://…`), tables and queue embedded in the
    /// data directory.
    Objects(String),
}

impl Target {
    /// The backend named `backend` (`embedded`, `aws`, `gcs`, `azure`) for the test `test`: AWS
    /// with its bucket, tables and queues created, GCS and Azure as a fresh bucket or container
    /// for the objects (tables and queue embedded). `None` (with a printed reason) when its
    /// emulator is not there outside CI; in CI a missing emulator fails the test. This is what
    /// `per_backend!` runs each test on.
    pub fn named(backend: &str, test: &str) -> Option<Self> {
        match backend {
            "embedded" => Some(Self::Embedded),
            "aws" => Self::aws(test),
            "gcs" => emulator_configured("gcs", "TILEGATE_GCS_EMULATOR", test)
                .then(|| Self::Objects(format!("gs://{}/out", unique("tg")))),
            "azure" => emulator_configured("azure", "TILEGATE_AZURE_EMULATOR", test).then(|| {
                let account = azure_emulator();
                Self::Objects(format!("az://{}/{}/out", account.name, azure_container()))
            }),
            other => panic!("{test}: no backend named `{other}`"),
        }
    }

    /// AWS on the emulator (bucket, tables and queues created), or `None` (with a printed
    /// reason) without an emulator outside CI; in CI a missing emulator fails the test.
    pub fn aws(test: &str) -> Option<Self> {
        let aws = Aws::for_test(test)?;
        aws.json(tempdir().path(), &["init", "--create-bucket"]);
        Some(Self::Aws(aws))
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::Embedded => "embedded",
            Self::Aws(_) => "aws",
            Self::Objects(url) if url.starts_with("gs://") => "gcs",
            Self::Objects(url) if url.starts_with("az://") => "azure",
            Self::Objects(_) => "objects",
        }
    }

    /// `tilegate` with the data directory and backend flags set.
    pub fn command(&self, data: &Path) -> Command {
        let mut cmd = Command::new(tilegate_bin());
        match self {
            Self::Embedded => {
                cmd.arg("--data").arg(data);
            }
            Self::Aws(aws) => {
                cmd.args(aws.args(data));
            }
            Self::Objects(url) => {
                cmd.arg("--data").arg(data).args(["--objects", url]);
            }
        }
        cmd
    }

    /// Run with `--json`, require success, parse stdout.
    pub fn json(&self, data: &Path, args: &[&str]) -> Value {
        let out = self
            .command(data)
            .arg("--json")
            .args(args)
            .output()
            .expect("run tilegate");
        json_of(args, &out)
    }

    /// The same stores the binary works on, opened in the test process.
    /// Copy the store's object `key` to the file `out`, for GDAL to look at.
    pub fn copy_object(&self, data: &Path, key: &str, out: &Path) {
        use tilegate_core::object::ObjectStoreExt as _;
        let rt = tokio::runtime::Runtime::new().unwrap();
        let b = rt.block_on(self.backends(data));
        let got = rt.block_on(b.objects.get_bytes(&crate::object_key(key)));
        std::fs::write(out, &got.expect("read the object").bytes).expect("write its copy");
    }

    pub async fn backends(&self, data: &Path) -> tilegate_core::Backends {
        match self {
            Self::Embedded => tilegate_embedded::open_data_dir(data, 3).expect("open data dir"),
            Self::Aws(aws) => {
                tilegate_aws::AwsBackends::connect(&aws.objects, &aws.tables, &aws.queue, 3)
                    .await
                    .expect("connect to the emulator")
            }
            Self::Objects(url) => tilegate_backends::open(&tilegate_backends::Urls {
                data: data.to_path_buf(),
                objects: Some(url.clone()),
                tables: None,
                queue: None,
            })
            .await
            .expect("open the stores"),
        }
    }
}
