//! The real terminal: raw mode and the alternate screen while the dashboard runs, left
//! as they were when it ends, when drawing fails and when any thread panics. The
//! dashboard reads its [`Feed`] at its own frame rate and never blocks the feed's
//! writers beyond the copy of a snapshot.

use crate::view::View;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::crossterm::{cursor, execute, terminal};
use ratatui::Terminal;
use std::io::{self, Stdout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

/// One frame every 200 ms: 5 frames a second (the bound is 10).
pub const FRAME: Duration = Duration::from_millis(200);

/// Whether this process has the terminal in raw mode on the alternate screen.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// What the dashboard shows and whom it tells about keys.
pub trait Feed {
    /// The view now (called once per frame).
    fn view(&mut self) -> View;
    /// The dashboard's work is over: leave the terminal.
    fn done(&self) -> bool;
    /// `q` or Ctrl-C.
    fn quit(&mut self);
    /// `s`.
    fn skip(&mut self) {}
}

/// A key's meaning on the dashboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Leave the dashboard (`q`, Ctrl-C).
    Quit,
    /// End the current level early (`s`).
    Skip,
    /// Toggle the formulas overlay (`?`, `h`).
    Help,
    /// A key the dashboard ignores, or a release.
    None,
}

/// What a key press does: `q`, Esc-less Ctrl-C (raw mode turns it into a key) quit;
/// `s` skips the level; `?` toggles the formulas.
pub fn action(key: KeyEvent) -> Action {
    if key.kind != KeyEventKind::Press {
        return Action::None;
    }
    match key.code {
        KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => Action::Quit,
        KeyCode::Char('q') | KeyCode::Char('Q') => Action::Quit,
        KeyCode::Char('s') | KeyCode::Char('S') => Action::Skip,
        KeyCode::Char('?') | KeyCode::Char('h') => Action::Help,
        _ => Action::None,
    }
}

/// The terminal in dashboard mode; dropping it restores the terminal.
pub struct Session {
    terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl Session {
    /// Raw mode, the alternate screen, the cursor hidden; a panic anywhere restores them
    /// before the panic message prints.
    pub fn enter() -> io::Result<Session> {
        install_panic_hook();
        terminal::enable_raw_mode()?;
        ACTIVE.store(true, Ordering::SeqCst);
        let entered = execute!(io::stdout(), terminal::EnterAlternateScreen, cursor::Hide)
            .and_then(|_| Terminal::new(CrosstermBackend::new(io::stdout())));
        match entered {
            Ok(terminal) => Ok(Session { terminal }),
            Err(e) => {
                restore();
                Err(e)
            }
        }
    }

    /// Draws one frame of `view`.
    pub fn draw(&mut self, view: &View) -> io::Result<()> {
        self.terminal.draw(|f| crate::render(f, view))?;
        Ok(())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        restore();
    }
}

/// Leaves raw mode and the alternate screen and shows the cursor, once; safe to call
/// from any thread and more than once.
pub fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = terminal::disable_raw_mode();
        let _ = execute!(io::stdout(), terminal::LeaveAlternateScreen, cursor::Show);
    }
}

/// Whether the dashboard still owns the terminal (a panic elsewhere gives it back).
pub fn active() -> bool {
    ACTIVE.load(Ordering::SeqCst)
}

fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}

/// Runs the dashboard until the feed is done: a frame every [`FRAME`] (sooner after a
/// key), keys handed to the feed. The terminal is restored on return, error or panic.
pub fn run(feed: &mut impl Feed) -> io::Result<()> {
    let mut session = Session::enter()?;
    let mut help = false;
    while !feed.done() && active() {
        let mut view = feed.view();
        view.help = help;
        session.draw(&view)?;
        let next = Instant::now() + FRAME;
        while let Some(left) = next.checked_duration_since(Instant::now()) {
            if !event::poll(left)? {
                break;
            }
            let Event::Key(key) = event::read()? else {
                continue;
            };
            match action(key) {
                Action::Quit => feed.quit(),
                Action::Skip => feed.skip(),
                Action::Help => help = !help,
                Action::None => continue,
            }
            break;
        }
    }
    drop(session);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_actions() {
        let press = |code, modifiers| action(KeyEvent::new(code, modifiers));
        assert_eq!(press(KeyCode::Char('q'), KeyModifiers::NONE), Action::Quit);
        assert_eq!(
            press(KeyCode::Char('c'), KeyModifiers::CONTROL),
            Action::Quit
        );
        assert_eq!(press(KeyCode::Char('c'), KeyModifiers::NONE), Action::None);
        assert_eq!(press(KeyCode::Char('s'), KeyModifiers::NONE), Action::Skip);
        assert_eq!(press(KeyCode::Char('?'), KeyModifiers::SHIFT), Action::Help);
        let mut release = KeyEvent::new(KeyCode::Char('q'), KeyModifiers::NONE);
        release.kind = KeyEventKind::Release;
        assert_eq!(action(release), Action::None);
    }

    #[test]
    fn restoring_twice_or_without_a_session_is_harmless() {
        restore();
        restore();
        assert!(!active());
    }
}
