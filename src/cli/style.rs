//! Colour for the operator's terminal, and nowhere else.
//!
//! - [`Style`] wraps text in ANSI SGR codes when enabled, so renderers make
//!   the same text either way and tests read it plain. Decided once, in
//!   [`Style::detect`]. Padding goes on before colour, so columns line up.
//! - [`visible`]: text other people chose (cgroup names, keys, task names,
//!   paths) goes through it, so a control character is shown as an escape,
//!   never obeyed by the terminal.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::IsTerminal;

/// When to colour (`--color`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColorChoice {
    /// Only when standard output is a terminal and NO_COLOR is unset.
    #[default]
    Auto,
    /// Always (for less -R or watch -c), even with NO_COLOR set.
    Always,
    /// Never.
    Never,
}

/// The colours the commands use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paint {
    Bold,
    Dim,
    Red,
    Green,
    Yellow,
    /// One of the workload palette ([`Style::tag`]).
    Palette(usize),
}

/// Bright, distinguishable foregrounds for workload tags: cyan, magenta, blue,
/// green, yellow, bright cyan, bright magenta, bright blue.
const PALETTE: [&str; 8] = ["36", "35", "34", "32", "33", "96", "95", "94"];

/// Whether and how to colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Style {
    enabled: bool,
}

impl Style {
    /// Colours on.
    pub const ON: Style = Style { enabled: true };
    /// Colours off: text comes back unchanged.
    pub const OFF: Style = Style { enabled: false };

    /// Decides for standard output, from `NO_COLOR` and whether it is a
    /// terminal.
    pub fn detect(choice: ColorChoice) -> Style {
        Style::decide(
            choice,
            std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
            std::io::stdout().is_terminal(),
        )
    }

    /// The decision itself: `auto` colours only a terminal, and not when
    /// `NO_COLOR` is set (to anything but the empty string:
    /// <https://no-color.org>).
    pub fn decide(choice: ColorChoice, no_color: bool, terminal: bool) -> Style {
        let enabled = match choice {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => terminal && !no_color,
        };
        Style { enabled }
    }

    pub fn enabled(self) -> bool {
        self.enabled
    }

    /// `text` in `paint`.
    pub fn paint(self, paint: Paint, text: &str) -> String {
        if !self.enabled || text.is_empty() {
            return text.to_string();
        }
        let code = match paint {
            Paint::Bold => "1",
            Paint::Dim => "2",
            Paint::Red => "31",
            Paint::Green => "32",
            Paint::Yellow => "33",
            Paint::Palette(i) => PALETTE[i % PALETTE.len()],
        };
        format!("\x1b[{code}m{text}\x1b[0m")
    }

    pub fn bold(self, text: &str) -> String {
        self.paint(Paint::Bold, text)
    }

    pub fn dim(self, text: &str) -> String {
        self.paint(Paint::Dim, text)
    }

    pub fn red(self, text: &str) -> String {
        self.paint(Paint::Red, text)
    }

    pub fn green(self, text: &str) -> String {
        self.paint(Paint::Green, text)
    }

    pub fn yellow(self, text: &str) -> String {
        self.paint(Paint::Yellow, text)
    }

    /// The colour of workload number `i` (its tag and its row of the legend).
    pub fn tag(self, i: usize, text: &str) -> String {
        self.paint(Paint::Palette(i), text)
    }

    /// A health state in its colour: green healthy, yellow degraded, red
    /// anything else.
    pub fn health(self, state: &str) -> String {
        match state {
            "healthy" => self.green(state),
            "degraded" => self.yellow(state),
            _ => self.red(state),
        }
    }
}

/// Whether `c` must not reach a terminal as it is: the C0 controls, DEL and
/// the C1 controls (ESC starts escape sequences that recolour, move the cursor,
/// retitle the window or feed the clipboard; U+009B is a one-character CSI on
/// terminals that honour C1; `\r` and backspace overwrite what was printed),
/// and the Unicode bidirectional and line controls, which reorder or break
/// the text around them so a key can read as another.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}'
        )
}

/// `text` with every character that must not reach a terminal as it is
/// (`hidden`) written as an escape in Rust's style: `\t`, `\n`, `\r`, `\x1b`
/// below U+0080, `\u{9b}` above. Everything else, printable non-ASCII
/// included, is kept. A backslash is not doubled: systemd's unit names carry
/// `\x2d` escapes of their own, which the operator reads and types as they
/// are; `--json` is the exact form.
///
/// Every human-readable output of text from the daemon's documents, the
/// cgroup tree or `/proc` goes through this; columns are measured on its
/// result.
pub fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(hidden) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if hidden(c) && c.is_ascii() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if hidden(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        assert_eq!(
            visible("a\x1b[31mb\r\n\t\x07\x00\x7f\u{9b}2J\u{202e}c"),
            "a\\x1b[31mb\\r\\n\\t\\x07\\x00\\x7f\\u{9b}2J\\u{202e}c"
        );
        for kept in [
            "kubepods.slice",
            "pod:\u{e9}t\u{e9}/\u{1F600}",
            "dev-disk-by\\x2duuid",
        ] {
            assert!(
                matches!(visible(kept), Cow::Borrowed(s) if s == kept),
                "{kept:?} is printable as it is"
            );
        }
    }

    #[test]
    fn off_is_plain_and_on_wraps_in_sgr() {
        assert_eq!(Style::OFF.red("x"), "x");
        assert_eq!(Style::ON.red("x"), "\x1b[31mx\x1b[0m");
        assert_eq!(Style::ON.bold(""), "", "nothing to colour");
        assert_eq!(Style::detect(ColorChoice::Never), Style::OFF);
        assert_eq!(Style::detect(ColorChoice::Always), Style::ON);
    }

    #[test]
    fn auto_colours_a_terminal_only_without_no_color() {
        use ColorChoice::*;
        assert_eq!(Style::decide(Auto, false, true), Style::ON);
        assert_eq!(Style::decide(Auto, true, true), Style::OFF, "NO_COLOR");
        assert_eq!(Style::decide(Auto, false, false), Style::OFF, "a pipe");
        assert_eq!(Style::decide(Never, false, true), Style::OFF);
        assert_eq!(Style::decide(Always, true, false), Style::ON, "asked for");
    }
}
