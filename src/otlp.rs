//! `--otlp`: the flags and the environment read into the exporter
//! (`cadence_otlp::run`), and its figures said at the end.

use crate::cli::OtlpArgs;
use cadence_core::report::Report;
pub use cadence_otlp::run::{warning, Export, Target};
use cadence_otlp::OtlpSink;

/// The exporter and its sink when `--otlp` or an `OTEL_EXPORTER_OTLP_*` endpoint asks
/// for one; a bad URL, header list or protocol is a usage error.
pub fn start(args: &OtlpArgs, target: Target<'_>) -> anyhow::Result<Option<(Export, OtlpSink)>> {
    let env = |k: &str| std::env::var(k).ok();
    let config = cadence_otlp::Config::resolve(args.otlp.as_deref(), args.otlp_protocol, &env)
        .map_err(crate::exit::usage)?;
    Ok(config
        .map(|c| cadence_otlp::run::start(c, target))
        .transpose()?)
}

/// `gen_ai.operation.name` for a request of `api`.
pub fn operation(api: cadence_wire::Api) -> &'static str {
    match api {
        cadence_wire::Api::Completions => "text_completion",
        _ => "chat",
    }
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
