//! The live dashboard of `cadence bench --tui` and `cadence top`: a frame is a pure
//! function of a [`View`] (snapshot-tested as text with ratatui's `TestBackend`), and
//! [`term`] owns the real terminal, restoring it when the dashboard ends or panics.

#![warn(missing_docs)]

pub mod dashboard;
pub mod live;
pub mod render;
pub mod term;
pub mod top;
pub mod view;

pub use render::render;
pub use view::{
    Alert, Bin, Counts, Latency, LevelProgress, Mode, Pacing, Pcts, SelfCheck, Side, Stalls,
    TableRow, View,
};

use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::Terminal;

/// The frame of `view` at `width` × `height`, as cells (text and style).
pub fn frame(view: &View, width: u16, height: u16) -> Buffer {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("test backend");
    terminal
        .draw(|f| render(f, view))
        .expect("drawing to memory");
    terminal.backend().buffer().clone()
}

/// The frame of `view` as plain text, one line per row, trailing spaces trimmed: what
/// the snapshot tests compare, `cadence top --once` prints and the book's dashboard
/// page (docs/src/dashboard.md) shows.
pub fn frame_text(view: &View, width: u16, height: u16) -> String {
    buffer_text(&frame(view, width, height))
}

/// A buffer's symbols as lines of text.
pub fn buffer_text(buf: &Buffer) -> String {
    let width = buf.area.width as usize;
    let mut out = String::new();
    for row in buf.content().chunks(width.max(1)) {
        let line: String = row.iter().map(|c| c.symbol()).collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
