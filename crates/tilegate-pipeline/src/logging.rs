//! The log subscriber of every tilegate process — the command line and the Lambda function
//! alike: lines filtered, formatted, and [`tilegate_core::redact`]ed before they are written.
//! An error's text, a field or a third-party crate's message can carry a signed URL or a
//! header; no process of tilegate's writes a log line that has not passed the redactor.

/// The log subscriber: lines filtered by `filter`, formatted, redacted ([`Redacted`]) and
/// written to `writer`.
pub fn subscriber<W>(
    filter: tracing_subscriber::EnvFilter,
    ansi: bool,
    writer: W,
) -> impl tracing::Subscriber + Send + Sync
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer)
        .event_format(Redacted(
            tracing_subscriber::fmt::format()
                .with_target(false)
                .with_ansi(ansi),
        ))
        .finish()
}

/// An event format whose lines are [`tilegate_core::redact`]ed before they are written.
pub struct Redacted<F>(pub F);

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for Redacted<F>
where
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let mut line = String::new();
        self.0.format_event(
            ctx,
            tracing_subscriber::fmt::format::Writer::new(&mut line),
            event,
        )?;
        writer.write_str(&tilegate_core::redact::redact(&line))
    }
}
