//! Edit mode (E): the command in a ratatui-textarea, for the human to
//! change before approving it. The core re-checks what comes back.

use ratatui::buffer::Buffer;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Span;
use ratatui::widgets::Widget;
use ratatui_textarea::{CursorMove, TextArea, WrapMode};

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
    /// The text is Lazaret's suggestion (a path filled in): the first
    /// character typed replaces it; a movement key makes it the human's.
    suggested: bool,
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
        textarea.move_cursor(CursorMove::End);
        Self {
            textarea,
            original,
            suggested: false,
        }
    }

    /// The text is a suggestion: typing replaces it, C-u clears it.
    #[must_use]
    pub(crate) fn suggesting(mut self) -> Self {
        self.suggested = !self.text().is_empty();
        self
    }

    /// Whether the text is still the untouched suggestion.
    pub fn is_suggestion(&self) -> bool {
        self.suggested
    }

    fn clear(&mut self) {
        self.textarea.move_cursor(CursorMove::Bottom);
        self.textarea.move_cursor(CursorMove::End);
        while self.textarea.delete_line_by_head() || self.textarea.delete_newline() {}
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
        self.textarea.move_cursor(CursorMove::Jump(0, col));
    }

    /// A one-line field, such as a path: no soft wrapping, so a long text
    /// scrolls sideways with the cursor kept in view; `placeholder` shows
    /// while it is empty.
    pub(crate) fn single_line(mut self, placeholder: &str) -> Self {
        self.textarea.set_wrap_mode(WrapMode::None);
        self.textarea.set_placeholder_text(placeholder);
        self
    }

    /// Handles one key: Enter submits, Esc and Ctrl-C cancel, the keys of
    /// a terminal's line editor edit (C-u to the line's start, C-w a word
    /// back, C-a / C-e start and end, M-b / M-f by words), anything else
    /// is typed.
    pub fn handle_key(&mut self, key: KeyEvent) -> EditOutcome {
        if key.kind == KeyEventKind::Release {
            return EditOutcome::Editing;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let alt = key.modifiers.contains(KeyModifiers::ALT);
        let suggested = std::mem::take(&mut self.suggested);
        match key.code {
            // Ctrl+M and Ctrl+J are Enter too; a command is one line.
            KeyCode::Enter => return EditOutcome::Submit(self.text()),
            KeyCode::Char('m' | 'j') if ctrl => return EditOutcome::Submit(self.text()),
            KeyCode::Esc => return EditOutcome::Cancel,
            KeyCode::Char('c') if ctrl => return EditOutcome::Cancel,
            KeyCode::Char('u') if ctrl => {
                self.textarea.delete_line_by_head();
            }
            KeyCode::Char('w') if ctrl => {
                self.textarea.delete_word();
            }
            KeyCode::Backspace if alt => {
                self.textarea.delete_word();
            }
            KeyCode::Char('a') if ctrl => self.textarea.move_cursor(CursorMove::Head),
            KeyCode::Char('e') if ctrl => self.textarea.move_cursor(CursorMove::End),
            KeyCode::Char('b') if alt => self.textarea.move_cursor(CursorMove::WordBack),
            KeyCode::Char('f') if alt => self.textarea.move_cursor(CursorMove::WordForward),
            KeyCode::Char(_) if suggested && !ctrl && !alt => {
                self.clear();
                self.textarea.input(key);
            }
            _ => {
                self.textarea.input(key);
            }
        }
        EditOutcome::Editing
    }

    /// Inserts pasted text at the cursor, made visible like the command
    /// (replacing a suggestion).
    pub fn paste(&mut self, text: &str) {
        if std::mem::take(&mut self.suggested) {
            self.clear();
        }
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
