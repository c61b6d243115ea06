//! ANSI styling for the console renderers (the run's and the sweep's), or none when
//! the output is not a terminal.

/// ANSI styling, or none.
#[derive(Clone, Copy)]
pub(crate) struct Painter(pub(crate) bool);

impl Painter {
    fn paint(self, s: &str, code: &str) -> String {
        if self.0 {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    pub(crate) fn bold(self, s: &str) -> String {
        self.paint(s, "1")
    }
    pub(crate) fn dim(self, s: &str) -> String {
        self.paint(s, "2")
    }
    pub(crate) fn red(self, s: &str) -> String {
        self.paint(s, "31")
    }
    pub(crate) fn green(self, s: &str) -> String {
        self.paint(s, "32")
    }
    pub(crate) fn yellow(self, s: &str) -> String {
        self.paint(s, "33")
    }
}
