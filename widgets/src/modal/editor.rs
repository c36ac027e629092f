//! Edit mode (E): the command in a ratatui-textarea, for the human to
//! change before approving it. The core re-checks what comes back.

use ratatui::buffer::Buffer;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Span;
use ratatui::widgets::Widget;
use ratatui_textarea::{TextArea, WrapMode};

use crate::visible::make_visible;

/// What a key did in the editor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EditOutcome {
    /// Still editing.
    Editing,
    /// Enter: approve and run this text.
    Submit(String),
    /// Esc: back to the request, nothing changed.
    Cancel,
}

/// The command editor. It starts from the command made visible: a hidden
/// character would be invisible in the editor too, so what the human edits
/// and submits is exactly what they see (an ESC comes back as the literal
/// `␛`, and the re-check sees that).
#[derive(Clone, Debug)]
pub struct CommandEditor {
    textarea: TextArea<'static>,
    original: String,
}

impl CommandEditor {
    pub fn new(command: &str) -> Self {
        let original = make_visible(command).0;
        let mut textarea = TextArea::new(vec![original.clone()]);
        textarea.set_wrap_mode(WrapMode::Glyph);
        textarea.set_style(Style::new().fg(Color::White).bg(Color::DarkGray));
        textarea.set_cursor_line_style(Style::new());
        textarea.set_cursor_style(Style::new().add_modifier(Modifier::REVERSED));
        textarea.set_placeholder_text("the command to run");
        textarea.move_cursor(ratatui_textarea::CursorMove::End);
        Self { textarea, original }
    }

    /// An empty editor for the reason of a denial.
    pub fn reason() -> Self {
        let mut editor = Self::new("");
        editor
            .textarea
            .set_placeholder_text("none: the agent is told it was denied");
        editor
    }

    /// The editor showing `text` with the cursor before its character
    /// `cursor`: for a frontend that keeps the line's state itself and
    /// draws it each frame.
    pub fn showing(text: &str, cursor: usize) -> Self {
        let mut editor = Self::new(text);
        editor.place_cursor(cursor);
        editor
    }

    /// [`CommandEditor::reason`] showing `text`, the cursor before its
    /// character `cursor`.
    pub fn reason_showing(text: &str, cursor: usize) -> Self {
        let mut editor = Self::reason();
        editor.textarea.insert_str(make_visible(text).0);
        editor.place_cursor(cursor);
        editor
    }

    fn place_cursor(&mut self, cursor: usize) {
        let col = u16::try_from(cursor).unwrap_or(u16::MAX);
        self.textarea
            .move_cursor(ratatui_textarea::CursorMove::Jump(0, col));
    }

    /// A one-line field, such as a path: no soft wrapping, so a long text
    /// scrolls sideways with the cursor kept in view; `placeholder` shows
    /// while it is empty.
    pub(crate) fn single_line(mut self, placeholder: &str) -> Self {
        self.textarea.set_wrap_mode(WrapMode::None);
        self.textarea.set_placeholder_text(placeholder);
        self
    }

    /// Handles one key: Enter submits, Esc cancels, everything else edits.
    pub fn handle_key(&mut self, key: KeyEvent) -> EditOutcome {
        if key.kind == KeyEventKind::Release {
            return EditOutcome::Editing;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            // Ctrl+M and Ctrl+J are Enter too; a command is one line.
            KeyCode::Enter => EditOutcome::Submit(self.text()),
            KeyCode::Char('m' | 'j') if ctrl => EditOutcome::Submit(self.text()),
            KeyCode::Esc => EditOutcome::Cancel,
            _ => {
                self.textarea.input(key);
                EditOutcome::Editing
            }
        }
    }

    /// Inserts pasted text at the cursor, made visible like the command.
    pub fn paste(&mut self, text: &str) {
        self.textarea.insert_str(make_visible(text).0);
    }

    /// The text as it stands.
    pub fn text(&self) -> String {
        self.textarea.lines().join("\n")
    }

    /// Whether the text differs from the command it started from.
    pub fn changed(&self) -> bool {
        self.text() != self.original
    }

    /// How many rows the text takes wrapped at `width`.
    pub(crate) fn display_rows(&self, width: u16) -> usize {
        let width = usize::from(width.max(1));
        self.textarea
            .lines()
            .iter()
            .map(|line| Span::raw(line.as_str()).width().div_ceil(width).max(1))
            .sum()
    }

    pub(crate) fn render(&self, area: Rect, buf: &mut Buffer) {
        (&self.textarea).render(area, buf);
    }
}
