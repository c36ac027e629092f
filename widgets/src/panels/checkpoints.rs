//! The checkpoints overlay (the workbench's prefix `K`): one domain's
//! checkpoints, newest selected, and the keys that take a new one, restore
//! one (after a y/n question) or fork one into a new domain (after asking
//! its name). [`CheckpointsForm`] is the state and its keys;
//! [`CheckpointsDialog`] draws it centred over the workbench. The app does
//! the work: it gets a [`CheckpointsOutcome`] and checks a fork's name
//! itself ([`CheckpointsForm::set_error`] keeps the question open).

use ratatui::buffer::{Buffer, CellWidth as _};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Clear, Padding, Paragraph, Widget};

use super::keep_start;
use crate::layout::centered;
use crate::visible::visible;

/// A checkpoint as the overlay lists it: plain text the app formats.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckpointRow {
    /// The checkpoint's name (the human's, or the time it was taken).
    pub name: String,
    /// When it was taken, e.g. `20261203-121320` (UTC).
    pub taken: String,
    /// Its size on disk, e.g. `1.5 MiB`.
    pub size: String,
}

/// What a key asks of the app.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckpointsOutcome {
    /// Nothing to do; the overlay stays open.
    Open,
    /// Esc: close the overlay.
    Close,
    /// `k`: take a new checkpoint of the domain (the overlay stays open;
    /// [`CheckpointsForm::set_rows`] shows it when it is there).
    Take,
    /// `y` after `r` or Enter: bring the domain back as checkpoint `name`;
    /// `force` when the human said yes to what [`CheckpointsForm::ask_force`]
    /// warned of.
    Restore { name: String, force: bool },
    /// Enter after `f` and a name: fork checkpoint `name` as `new` (as
    /// typed: the app checks it).
    Fork { name: String, new: String },
}

/// What the overlay asks, if anything.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Question {
    None,
    /// Restore the selected checkpoint? y/n.
    Restore,
    /// The fork's name, typed so far.
    ForkName(String),
    /// Restore anyway, although it costs what the warning says? y/n.
    Force(String),
}

/// The longest fork name the field takes (the rule allows 32; a few more
/// let the human see the app's refusal rather than lost keys).
const NAME_MAX: usize = 40;

/// The state of the checkpoints overlay.
///
/// Keys: Up/Down (Home/End) select; `k` takes a new checkpoint; `r` or
/// Enter asks whether to restore the selected one, `y` restores and any
/// other key keeps the domain as it is; `f` asks for a fork's name, Enter
/// forks and Esc goes back; Esc closes.
#[derive(Clone, Debug)]
pub struct CheckpointsForm {
    domain: String,
    rows: Vec<CheckpointRow>,
    selected: usize,
    question: Question,
    error: Option<String>,
}

impl CheckpointsForm {
    /// The overlay of `domain` (shown in its title, e.g. `gv 3f2a9c0d1b2e`)
    /// listing `rows`, oldest first; the newest is selected.
    pub fn new(domain: &str, rows: Vec<CheckpointRow>) -> Self {
        Self {
            domain: domain.to_string(),
            selected: rows.len().saturating_sub(1),
            rows,
            question: Question::None,
            error: None,
        }
    }

    /// The list read again. The selection stays on its checkpoint; one
    /// that is new (just taken) is selected.
    pub fn set_rows(&mut self, rows: Vec<CheckpointRow>) {
        let was = self.selected_name().map(str::to_string);
        let new = rows
            .iter()
            .position(|r| !self.rows.iter().any(|o| o.name == r.name));
        self.selected = new
            .or_else(|| rows.iter().position(|r| Some(&r.name) == was.as_ref()))
            .unwrap_or(rows.len().saturating_sub(1));
        self.rows = rows;
        if self.rows.is_empty() {
            self.question = Question::None;
        }
    }

    /// Shows `msg` (one line, made visible) under the list; the question
    /// asked stays open.
    pub fn set_error(&mut self, msg: impl Into<String>) {
        let msg: String = msg.into();
        self.error = Some(msg.lines().next().unwrap_or_default().to_string());
    }

    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// The selected checkpoint's name.
    pub fn selected_name(&self) -> Option<&str> {
        self.rows.get(self.selected).map(|r| r.name.as_str())
    }

    /// Asks again before the restore of the selected checkpoint: it would
    /// also cost what `warning` says (e.g. commits leaving a branch).
    pub fn ask_force(&mut self, warning: impl Into<String>) {
        self.question = Question::Force(warning.into());
    }

    /// Whether the overlay asks for a fork's name (a paste goes there).
    pub fn naming(&self) -> bool {
        matches!(self.question, Question::ForkName(_))
    }

    /// Pastes `text` into the fork's name, when it is asked for: its first
    /// line, control characters left out.
    pub fn paste(&mut self, text: &str) {
        if let Question::ForkName(name) = &mut self.question {
            let line = text.split(['\r', '\n']).next().unwrap_or_default();
            name.extend(line.chars().filter(|c| !c.is_control()));
            truncate_chars(name, NAME_MAX);
            self.error = None;
        }
    }

    /// Handles one key.
    pub fn handle_key(&mut self, key: KeyEvent) -> CheckpointsOutcome {
        if key.kind == KeyEventKind::Release {
            return CheckpointsOutcome::Open;
        }
        let chord = key
            .modifiers
            .intersects(KeyModifiers::CONTROL | KeyModifiers::ALT);
        match &mut self.question {
            Question::Restore | Question::Force(_) => {
                let force = matches!(self.question, Question::Force(_));
                self.question = Question::None;
                // Only a plain `y` restores: the restore ends sessions.
                if !chord && matches!(key.code, KeyCode::Char('y' | 'Y')) {
                    return match self.selected_name() {
                        Some(name) => CheckpointsOutcome::Restore {
                            name: name.to_string(),
                            force,
                        },
                        None => CheckpointsOutcome::Open,
                    };
                }
                CheckpointsOutcome::Open
            }
            Question::ForkName(typed) => {
                let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
                match key.code {
                    KeyCode::Esc => {
                        self.question = Question::None;
                        self.error = None;
                    }
                    KeyCode::Char('c') if ctrl => {
                        self.question = Question::None;
                        self.error = None;
                    }
                    KeyCode::Char('w') if ctrl => {
                        // A word back, as a terminal's line editor does.
                        let word = typed.trim_end_matches([' ', '-', '_']);
                        let keep = word.rfind([' ', '-', '_']).map_or(0, |i| i + 1);
                        typed.truncate(keep);
                        self.error = None;
                    }
                    KeyCode::Enter => {
                        let new = typed.trim().to_string();
                        if let Some(name) = self.selected_name() {
                            return CheckpointsOutcome::Fork {
                                name: name.to_string(),
                                new,
                            };
                        }
                    }
                    KeyCode::Backspace => {
                        typed.pop();
                        self.error = None;
                    }
                    KeyCode::Char('u') if chord => {
                        typed.clear();
                        self.error = None;
                    }
                    KeyCode::Char(c) if !chord && !c.is_control() => {
                        typed.push(c);
                        truncate_chars(typed, NAME_MAX);
                        self.error = None;
                    }
                    _ => {}
                }
                CheckpointsOutcome::Open
            }
            Question::None => {
                let last = self.rows.len().saturating_sub(1);
                let ctrl_c =
                    key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c');
                match key.code {
                    KeyCode::Esc => return CheckpointsOutcome::Close,
                    _ if ctrl_c => return CheckpointsOutcome::Close,
                    KeyCode::Up => self.selected = self.selected.saturating_sub(1),
                    KeyCode::Down => self.selected = (self.selected + 1).min(last),
                    KeyCode::Home => self.selected = 0,
                    KeyCode::End => self.selected = last,
                    KeyCode::Char('k') if !chord => {
                        self.error = None;
                        return CheckpointsOutcome::Take;
                    }
                    KeyCode::Char('r') | KeyCode::Enter if !chord && !self.rows.is_empty() => {
                        self.error = None;
                        self.question = Question::Restore;
                    }
                    KeyCode::Char('f') if !chord && !self.rows.is_empty() => {
                        self.error = None;
                        self.question = Question::ForkName(String::new());
                    }
                    _ => {}
                }
                CheckpointsOutcome::Open
            }
        }
    }
}

fn truncate_chars(text: &mut String, max: usize) {
    if let Some((at, _)) = text.char_indices().nth(max) {
        text.truncate(at);
    }
}

/// The overlay, drawn centred over `area` (the workbench), clearing what
/// it covers.
#[derive(Clone, Copy, Debug)]
pub struct CheckpointsDialog<'a> {
    form: &'a CheckpointsForm,
}

impl<'a> CheckpointsDialog<'a> {
    pub fn new(form: &'a CheckpointsForm) -> Self {
        Self { form }
    }
}

/// The keys of the list, as "Up/Down select · k take · ...".
const KEYS: [(&str, &str); 5] = [
    ("Up/Down", "select"),
    ("k", "take"),
    ("r/Enter", "restore"),
    ("f", "fork"),
    ("Esc", "close"),
];

/// The selected row's marker.
const MARK: &str = "› ";
/// Columns between the table's columns.
const SPACING: usize = 2;
/// The taken column: `20261203-121320`.
const TAKEN_W: usize = 15;
/// The size column: `1023.9 MiB`.
const SIZE_W: usize = 10;

fn key_style() -> Style {
    Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD)
}

fn dim() -> Style {
    Style::new().fg(Color::DarkGray)
}

fn text_width(text: &str) -> usize {
    usize::from(text.cell_width())
}

/// `text` padded with spaces (or cut) to `width` columns.
fn fit(text: &str, width: usize) -> String {
    let cut = keep_start(text, width);
    let pad = width.saturating_sub(text_width(&cut));
    format!("{cut}{}", " ".repeat(pad))
}

/// The list's keys, wrapped between items to `width`.
fn footer(width: usize) -> Vec<Line<'static>> {
    super::key_footer(&KEYS, width)
}

/// `spans` as a paragraph wrapped to `width` at spaces; a word longer
/// than a line is cut where the width ends (a name is never hidden).
fn wrapped(spans: &[Span<'_>], width: u16) -> Vec<Line<'static>> {
    let width = usize::from(width.max(1));
    let mut lines = vec![Line::default()];
    let mut used = 0;
    // A space was seen since the last word (perhaps at a span's end).
    let mut pending_space = false;
    for span in spans {
        // Each word keeps its span's style; the space before it is plain.
        for (i, word) in span.content.split(' ').enumerate() {
            pending_space |= i > 0;
            let mut word = word.to_string();
            if word.is_empty() {
                continue;
            }
            let space = usize::from(std::mem::take(&mut pending_space) && used > 0);
            if used > 0 && used + space + text_width(&word) > width {
                lines.push(Line::default());
                used = 0;
            } else if space == 1 {
                lines
                    .last_mut()
                    .expect("lines starts non-empty")
                    .push_span(" ");
                used += 1;
            }
            // Too long for any line: cut it over several.
            while text_width(&word) > width - used {
                let head = keep_start(&word, width - used);
                if head.is_empty() {
                    break;
                }
                word = word[head.len()..].to_string();
                lines
                    .last_mut()
                    .expect("lines starts non-empty")
                    .push_span(Span::styled(head, span.style));
                lines.push(Line::default());
                used = 0;
            }
            used += text_width(&word);
            lines
                .last_mut()
                .expect("lines starts non-empty")
                .push_span(Span::styled(word, span.style));
        }
    }
    lines
}

impl CheckpointsForm {
    /// What is asked under the list (and the error, if any), wrapped to
    /// `width`.
    fn question_lines(&self, width: u16) -> Vec<Line<'static>> {
        let name = self.selected_name().map(visible).unwrap_or_default();
        let bold = Style::new().add_modifier(Modifier::BOLD);
        let mut lines = match &self.question {
            Question::None => Vec::new(),
            Question::Restore => {
                let mut l = wrapped(
                    &[
                        Span::styled("Restore ", bold),
                        Span::styled(name, bold.fg(Color::Cyan)),
                        Span::styled("? ", bold),
                        Span::raw(
                            "Every session of this domain ends, and the domain comes back \
                             as it was at the checkpoint, its sessions as they were then.",
                        ),
                    ],
                    width,
                );
                l.push(Line::from(vec![
                    Span::styled("y", key_style()),
                    Span::raw(" restore · "),
                    Span::styled("n", key_style()),
                    Span::raw(" keep it as it is"),
                ]));
                l
            }
            Question::Force(warning) => {
                let mut l = wrapped(
                    &[
                        Span::styled("Restore ", bold),
                        Span::styled(name, bold.fg(Color::Cyan)),
                        Span::styled(" anyway? ", bold),
                        Span::raw(visible(warning)),
                    ],
                    width,
                );
                l.push(Line::from(vec![
                    Span::styled("y", key_style()),
                    Span::raw(" restore anyway · "),
                    Span::styled("n", key_style()),
                    Span::raw(" keep it as it is"),
                ]));
                l
            }
            Question::ForkName(typed) => {
                let mut l = wrapped(
                    &[
                        Span::styled("Fork ", bold),
                        Span::styled(name, bold.fg(Color::Cyan)),
                        Span::raw(" into a new domain beside this one, named: "),
                        Span::styled(
                            format!("{}▏", visible(typed)),
                            Style::new().fg(Color::White).bg(Color::DarkGray),
                        ),
                    ],
                    width,
                );
                l.push(Line::from(vec![
                    Span::styled("2–32 of a-z 0-9 _ - · ", dim()),
                    Span::styled("Enter", key_style()),
                    Span::raw(" fork · "),
                    Span::styled("Esc", key_style()),
                    Span::raw(" back"),
                ]));
                l
            }
        };
        if let Some(e) = &self.error {
            let style = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
            lines.extend(wrapped(
                &[Span::styled(format!("! {}", visible(e)), style)],
                width,
            ));
        }
        lines
    }
}

impl Widget for CheckpointsDialog<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let form = self.form;
        let area = area.intersection(buf.area);
        if area.is_empty() {
            return;
        }
        let title = format!(" Checkpoints of {} ", visible(&form.domain));
        let block = Block::bordered()
            .border_type(BorderType::Rounded)
            .border_style(Style::new().fg(Color::Cyan))
            .padding(Padding::horizontal(1))
            .title(Span::styled(
                title.clone(),
                Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
            ));
        let names: Vec<String> = form.rows.iter().map(|r| visible(&r.name)).collect();
        let name_w = names
            .iter()
            .map(|n| text_width(n))
            .max()
            .unwrap_or(0)
            .clamp(4, 40);
        let table_w = text_width(MARK) + name_w + SPACING + TAKEN_W + SPACING + SIZE_W;
        let footer_w = footer(usize::MAX)
            .iter()
            .map(Line::width)
            .max()
            .unwrap_or(0);
        let content_w = table_w.max(footer_w).max(text_width(&title)).max(56) + 4;
        let width = u16::try_from(content_w)
            .unwrap_or(u16::MAX)
            .min(area.width.saturating_sub(4).max(area.width.min(20)));
        let inner_w = block.inner(Rect::new(0, 0, width, 3)).width;

        let asked = form.question_lines(inner_w);
        let keys = footer(usize::from(inner_w));
        // Header, the list (one row at least), a gap, what is asked, a gap,
        // the keys.
        let list_rows = form.rows.len().max(1);
        let wanted = 1 + list_rows + 1 + asked.len() + usize::from(!asked.is_empty()) + keys.len();
        let height = u16::try_from(wanted + 2).unwrap_or(u16::MAX);
        let rect = centered(area, width, height);
        Clear.render(rect, buf);
        let inner = block.inner(rect);
        block.render(rect, buf);
        if inner.is_empty() {
            return;
        }

        // What is asked and the keys come first; the list gets what is
        // left, scrolled to keep the selection in view.
        let mut bottom = asked;
        if !bottom.is_empty() {
            bottom.push(Line::default());
        }
        bottom.extend(keys);
        let fixed = 2 + bottom.len();
        let room = usize::from(inner.height).saturating_sub(fixed).max(1);
        let first = (form.selected + 1).saturating_sub(room);

        let mut lines: Vec<Line<'static>> = Vec::new();
        let inner_w = usize::from(inner.width);
        let name_w = name_w.min(inner_w.saturating_sub(text_width(MARK)));
        lines.push(Line::from(Span::styled(
            keep_start(
                &format!(
                    "{}{}{}{}{}{:>SIZE_W$}",
                    " ".repeat(text_width(MARK)),
                    fit("NAME", name_w),
                    " ".repeat(SPACING),
                    fit("TAKEN (UTC)", TAKEN_W),
                    " ".repeat(SPACING),
                    "SIZE"
                ),
                inner_w,
            ),
            Style::new().add_modifier(Modifier::BOLD),
        )));
        if form.rows.is_empty() {
            lines.push(Line::from(vec![
                Span::styled("No checkpoints yet: ", dim()),
                Span::styled("k", key_style()),
                Span::styled(" takes one.", dim()),
            ]));
        }
        for (i, (row, name)) in form.rows.iter().zip(&names).enumerate().skip(first) {
            if lines.len() > room {
                break;
            }
            let selected = i == form.selected;
            let text = format!(
                "{}{}{}{}{}{:>SIZE_W$}",
                if selected { MARK } else { "  " },
                fit(name, name_w),
                " ".repeat(SPACING),
                fit(&visible(&row.taken), TAKEN_W),
                " ".repeat(SPACING),
                keep_start(&visible(&row.size), SIZE_W),
            );
            let style = if selected {
                Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD)
            } else {
                Style::new()
            };
            lines.push(Line::from(Span::styled(
                fit(&text, inner_w.min(text_width(&text))),
                style,
            )));
        }
        lines.push(Line::default());
        lines.extend(bottom);
        Paragraph::new(lines).render(inner, buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(names: &[&str]) -> Vec<CheckpointRow> {
        names
            .iter()
            .map(|n| CheckpointRow {
                name: n.to_string(),
                taken: "20260101-000000".into(),
                size: "1.5 MiB".into(),
            })
            .collect()
    }

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    #[test]
    fn restore_asks_first_and_only_y_restores() {
        let mut f = CheckpointsForm::new("gv", rows(&["a", "b"]));
        assert_eq!(f.selected_name(), Some("b"));
        f.handle_key(key(KeyCode::Up));
        assert_eq!(f.handle_key(key(KeyCode::Enter)), CheckpointsOutcome::Open);
        // Anything but y keeps the domain as it is.
        assert_eq!(
            f.handle_key(key(KeyCode::Char('k'))),
            CheckpointsOutcome::Open
        );
        f.handle_key(key(KeyCode::Char('r')));
        assert_eq!(
            f.handle_key(key(KeyCode::Char('y'))),
            CheckpointsOutcome::Restore {
                name: "a".into(),
                force: false
            }
        );
        // Asked again when it costs more: only y forces it.
        f.ask_force("branch x goes back");
        assert_eq!(
            f.handle_key(key(KeyCode::Char('n'))),
            CheckpointsOutcome::Open
        );
        f.ask_force("branch x goes back");
        assert_eq!(
            f.handle_key(key(KeyCode::Char('y'))),
            CheckpointsOutcome::Restore {
                name: "a".into(),
                force: true
            }
        );
    }

    #[test]
    fn a_fork_is_named_and_the_list_follows_a_new_checkpoint() {
        let mut f = CheckpointsForm::new("gv", rows(&["a"]));
        assert_eq!(
            f.handle_key(key(KeyCode::Char('k'))),
            CheckpointsOutcome::Take
        );
        f.set_rows(rows(&["a", "b"]));
        assert_eq!(f.selected_name(), Some("b"));
        f.handle_key(key(KeyCode::Char('f')));
        assert!(f.naming());
        for c in "try2x".chars() {
            f.handle_key(key(KeyCode::Char(c)));
        }
        f.handle_key(key(KeyCode::Backspace));
        f.paste("\x1b\n");
        assert_eq!(
            f.handle_key(key(KeyCode::Enter)),
            CheckpointsOutcome::Fork {
                name: "b".into(),
                new: "try2".into()
            }
        );
        // Refused by the app: the question stays, with the reason.
        f.set_error("`try2` is taken\nmore");
        assert_eq!(f.error(), Some("`try2` is taken"));
        assert!(f.naming());
        f.handle_key(key(KeyCode::Esc));
        assert!(!f.naming());
        assert_eq!(f.handle_key(key(KeyCode::Esc)), CheckpointsOutcome::Close);
        // Nothing to restore or fork in an empty list.
        let mut empty = CheckpointsForm::new("gv", Vec::new());
        empty.handle_key(key(KeyCode::Char('f')));
        assert!(!empty.naming());
        assert_eq!(
            empty.handle_key(key(KeyCode::Char('y'))),
            CheckpointsOutcome::Open
        );
    }
}
