//! The `cadence` binary: parse, run, map the result to an exit code. Everything else
//! lives in the library so tests can drive the real tool in-process.

fn main() -> std::process::ExitCode {
    cadence::main()
}
