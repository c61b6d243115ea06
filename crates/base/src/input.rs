//! The one way a file input is read whole (a config, a dataset, a trace, a CA file):
//! up to a stated ceiling per kind of input and not a byte past it, so `/dev/zero`, a
//! FIFO or a huge file given where a small one belongs is an error naming the file,
//! the ceiling and the flag that raises it, not the process's memory. The only file
//! I/O of this crate.

use std::io::Read;
use std::path::{Path, PathBuf};

/// A kind of file input and the most of it that is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ceiling {
    /// What the file is, in words ("watch config", "dataset").
    pub what: &'static str,
    /// The most bytes read; a file with more is refused.
    pub max: u64,
    /// The flag that raises the ceiling, when one does.
    pub flag: Option<&'static str>,
}

/// A TOML config (the watch's, an engine's): 16 MiB, thousands of times a real one.
pub const CONFIG: Ceiling = Ceiling::of("config", 16 << 20);

/// A PEM file of CA certificates: 16 MiB (the public roots are about 200 KiB).
pub const CA_FILE: Ceiling = Ceiling::of("CA file", 16 << 20);

/// A JSON array of tool definitions (`--tools`): 16 MiB.
pub const TOOLS: Ceiling = Ceiling::of("tools file", 16 << 20);

/// A dataset of prompts (a watch target's `dataset`; bench's `--dataset` by
/// `--max-input`): 1 GiB, past the largest public ones (ShareGPT's is 642 MB).
pub const DATASET: Ceiling = Ceiling::of("dataset", 1 << 30);

/// A request trace (`--trace`), an agent trace (`--agent-trace`), a corpus
/// (`--corpus`), a tokenizer, a saved report or a send log: 1 GiB.
pub const LARGE: Ceiling = Ceiling::of("input", 1 << 30);

impl Ceiling {
    /// `max` bytes of an input called `what`, no flag raising it.
    pub const fn of(what: &'static str, max: u64) -> Ceiling {
        Ceiling {
            what,
            max,
            flag: None,
        }
    }

    /// The same ceiling, naming the input `what`.
    pub const fn named(self, what: &'static str) -> Ceiling {
        Ceiling { what, ..self }
    }
}

/// Why a file input was not read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// It could not be opened or read.
    #[error("cannot read the {what} {path}: {error}")]
    Io {
        /// What the file is.
        what: &'static str,
        /// The file as given.
        path: PathBuf,
        /// The operating system's reason.
        error: std::io::Error,
    },
    /// It holds more than the ceiling.
    #[error(
        "the {what} {path} holds more than {max} bytes, the most a {what} is read{}",
        flag.map_or_else(String::new, |f| format!(" (raise it with {f})"))
    )]
    TooLarge {
        /// What the file is.
        what: &'static str,
        /// The file as given.
        path: PathBuf,
        /// The ceiling in bytes.
        max: u64,
        /// The flag that raises it, if any.
        flag: Option<&'static str>,
    },
    /// It is not UTF-8 text.
    #[error("the {what} {path} is not UTF-8 text: {error}")]
    NotText {
        /// What the file is.
        what: &'static str,
        /// The file as given.
        path: PathBuf,
        /// Where the first invalid byte is.
        error: std::str::Utf8Error,
    },
}

impl InputError {
    /// What is wrong, without the file's name (for a caller whose message names it).
    pub fn reason(&self) -> String {
        match self {
            InputError::Io { error, .. } => error.to_string(),
            InputError::TooLarge {
                what, max, flag, ..
            } => format!(
                "holds more than {max} bytes, the most a {what} is read{}",
                flag.map_or_else(String::new, |f| format!(" (raise it with {f})"))
            ),
            InputError::NotText { error, .. } => format!("not UTF-8 text: {error}"),
        }
    }
}

/// The bytes of `path` (a file, a pipe or a device), at most `ceiling.max` of them;
/// more is [`InputError::TooLarge`] with nothing more read than one byte past it.
pub fn read_bytes(path: &Path, ceiling: Ceiling) -> Result<Vec<u8>, InputError> {
    let io = |error| InputError::Io {
        what: ceiling.what,
        path: path.to_path_buf(),
        error,
    };
    let too_large = || InputError::TooLarge {
        what: ceiling.what,
        path: path.to_path_buf(),
        max: ceiling.max,
        flag: ceiling.flag,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let known = file.metadata().map_err(io)?;
    if known.is_file() && known.len() > ceiling.max {
        return Err(too_large());
    }
    read_capped(file, ceiling.max, known.is_file().then_some(known.len()))
        .map_err(io)?
        .ok_or_else(too_large)
}

/// The text of `path`, as [`read_bytes`], refused when it is not UTF-8.
pub fn read_text(path: &Path, ceiling: Ceiling) -> Result<String, InputError> {
    let bytes = read_bytes(path, ceiling)?;
    String::from_utf8(bytes).map_err(|e| InputError::NotText {
        what: ceiling.what,
        path: path.to_path_buf(),
        error: e.utf8_error(),
    })
}

/// All of `from` when it holds at most `max` bytes, else `None` (one byte past `max`
/// read, no more). `hint`: its length when known, room made for it up front.
pub fn read_capped(
    from: impl Read,
    max: u64,
    hint: Option<u64>,
) -> std::io::Result<Option<Vec<u8>>> {
    let room = hint.unwrap_or(0).min(max).min(64 << 20);
    let mut out = Vec::with_capacity(usize::try_from(room).unwrap_or(0));
    from.take(max.saturating_add(1)).read_to_end(&mut out)?;
    Ok((out.len() as u64 <= max).then_some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_error_says_its_cause_once_in_a_chain() {
        let e = InputError::Io {
            what: "config",
            path: "w.toml".into(),
            error: std::io::Error::other("permission denied"),
        };
        assert!(std::error::Error::source(&e).is_none());
        assert_eq!(
            e.to_string(),
            "cannot read the config w.toml: permission denied"
        );
    }

    const TINY: Ceiling = Ceiling {
        what: "test input",
        max: 8,
        flag: Some("--max-test"),
    };

    #[test]
    fn a_stream_of_exactly_the_ceiling_is_read_one_byte_more_is_not() {
        let got = read_capped(&b"12345678"[..], 8, None).unwrap();
        assert_eq!(got.as_deref(), Some(&b"12345678"[..]));
        assert_eq!(read_capped(&b"123456789"[..], 8, None).unwrap(), None);
        assert_eq!(read_capped(&b""[..], 0, None).unwrap(), Some(Vec::new()));
        assert_eq!(read_capped(&b"1"[..], 0, None).unwrap(), None);
    }

    #[test]
    fn an_endless_device_is_refused_at_the_ceiling_naming_file_limit_and_flag() {
        let e = read_text(Path::new("/dev/zero"), TINY).unwrap_err();
        assert!(matches!(e, InputError::TooLarge { max: 8, .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "the test input /dev/zero holds more than 8 bytes, the most a test input is \
             read (raise it with --max-test)"
        );
        let e = read_text(Path::new("/dev/zero"), TINY.named("dataset")).unwrap_err();
        assert!(e.to_string().starts_with("the dataset /dev/zero"), "{e}");
    }

    #[test]
    fn a_regular_file_is_read_whole_under_the_ceiling_and_refused_over_it() {
        let dir = std::env::temp_dir().join(format!("cadence-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (small, big, bad) = (dir.join("small"), dir.join("big"), dir.join("bad"));
        std::fs::write(&small, "8 bytes!").unwrap();
        std::fs::write(&big, "nine byte").unwrap();
        std::fs::write(&bad, [0xff, 0xfe]).unwrap();
        assert_eq!(read_text(&small, TINY).unwrap(), "8 bytes!");
        let e = read_text(&big, TINY).unwrap_err();
        assert!(e.to_string().contains("holds more than 8 bytes"), "{e}");
        let e = read_text(&bad, TINY).unwrap_err();
        assert!(e.to_string().contains("is not UTF-8 text"), "{e}");
        let e = read_text(&dir.join("absent"), TINY).unwrap_err();
        assert!(
            e.to_string().starts_with("cannot read the test input"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
