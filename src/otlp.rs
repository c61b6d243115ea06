//! `--otlp`: the flags and the environment read into the exporter
//! (`cadence_otlp::run`), and its figures said at the end.

use crate::cli::BenchArgs;
use cadence_core::report::Report;
pub use cadence_otlp::run::{warning, Export, Target};
use cadence_otlp::OtlpSink;

/// The exporter and its sink for bench's requests to `target` (client spans) when
/// `--otlp` or an `OTEL_EXPORTER_OTLP_*` endpoint asks for one; a bad URL, header list
/// or protocol is a usage error.
pub fn start_client(
    args: &BenchArgs,
    target: &cadence_bench::target::Target,
    model: &str,
) -> anyhow::Result<Option<(Export, OtlpSink)>> {
    let env = |k: &str| std::env::var(k).ok();
    let (flag, protocol) = (args.otlp.otlp.as_deref(), args.otlp.otlp_protocol);
    let config = cadence_otlp::Config::resolve(flag, protocol, &env).map_err(crate::exit::usage)?;
    let completions = target.api == cadence_wire::Api::Completions;
    let t = Target {
        endpoint: &target.endpoint,
        operation: if completions {
            "text_completion"
        } else {
            "chat"
        },
        model,
        stall_threshold: args.stall_threshold,
        chunk_events: args.otlp.otlp_chunk_events,
        kind: cadence_otlp::proto::SpanKind::Client,
    };
    Ok(config.map(|c| cadence_otlp::run::start(c, t)).transpose()?)
}

/// Sends what is queued (the record thread, which made the spans, has finished), says
/// what came of it on stderr (a drop even when `quiet`) and puts it in the report.
pub fn finish(export: Option<Export>, report: &mut Report, quiet: bool) {
    let Some(s) = export.map(Export::finish) else {
        return;
    };
    if let Some(w) = warning(&s) {
        eprintln!("cadence: {w}");
        report.warnings.push(w);
    } else if !quiet {
        eprintln!("OTLP: {} spans exported to {}.", s.exported, s.endpoint);
    }
    report.otlp = Some(s);
}
