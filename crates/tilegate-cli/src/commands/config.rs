//! `config`: the backends this command line selects — flags, environment and the `--config`
//! file merged — printed as a `--config` file, to keep or to hand to another host.

use crate::ctx::Ctx;
use clap::Args;
use std::process::ExitCode;

/// Print the backends this command line selects — flags, environment and the --config file
/// merged, in that order of precedence — as a --config file (TOML; secrets in URLs redacted).
///
/// `tilegate --objects s3://bucket/prefix config > tilegate.toml` keeps a selection for another
/// shell or host. `--json` changes nothing: the output is the file.
#[derive(Debug, Args)]
pub struct ConfigArgs {}

impl ConfigArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        print!("{}", tilegate_core::redact::redact(&config_file(cx)));
        Ok(ExitCode::SUCCESS)
    }
}

/// The selection of `cx` as the `--config` file reads it: one `key = "value"` line per role
/// that is set. A JSON string is a TOML basic string but for DEL, which TOML wants escaped
/// (the `toml` crate is built here to read, not to write).
fn config_file(cx: &Ctx) -> String {
    let sel = &cx.sel;
    let data = sel.data.to_string_lossy();
    let mut text = String::new();
    for (key, value) in [
        ("data", Some(data.as_ref())),
        ("objects", sel.objects.as_deref()),
        ("tables", sel.tables.as_deref()),
        ("queue", sel.queue.as_deref()),
    ] {
        if let Some(v) = value {
            let quoted = serde_json::Value::from(v)
                .to_string()
                .replace('\u{7f}', "\\u007F");
            text.push_str(&format!("{key} = {quoted}\n"));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::ConfigFile;
    use crate::ctx::Selection;
    use crate::output::Out;
    use std::path::PathBuf;

    /// What `config` prints is a `--config` file that selects the same backends.
    #[test]
    fn the_printed_file_selects_the_same_backends() {
        for sel in [
            Selection {
                data: PathBuf::from("./tilegate-data"),
                objects: None,
                tables: None,
                queue: None,
            },
            Selection {
                data: PathBuf::from("/srv/tg"),
                objects: Some("s3://bucket/prefix".into()),
                tables: Some("dynamodb://tg".into()),
                queue: Some("sqs://work".into()),
            },
            Selection {
                data: PathBuf::from("C:\\tg \"data\"\u{7f}\t\u{1}é"),
                objects: Some("file:///tmp/o b".into()),
                tables: None,
                queue: Some("sqlite://q.db".into()),
            },
        ] {
            let cx = Ctx {
                out: Out::new(false, sel.objects_root()),
                sel: sel.clone(),
                policies: Default::default(),
            };
            let text = config_file(&cx);
            let back: ConfigFile = toml::from_str(&text).unwrap();
            assert_eq!(back.data.as_ref(), Some(&sel.data), "{text}");
            assert_eq!(
                (back.objects, back.tables, back.queue),
                (sel.objects, sel.tables, sel.queue),
                "{text}"
            );
        }
    }
}
