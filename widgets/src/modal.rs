//! The approval modal: a Host Escalation request drawn over the pane of the
//! Client Session that asked, so the human reads exactly what would run.
//!
//! Every string is made visible first ([`crate::visible`]): control, bidi
//! and zero-width characters appear as highlighted placeholders. The command
//! is wrapped, never cut; when the pane is too small for the whole request
//! the body scrolls ([`ApprovalView`]) and reports whether the human has
//! seen all of it.

mod editor;
pub(crate) mod wrap;

pub use editor::{CommandEditor, EditOutcome};

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Clear, Paragraph, StatefulWidget, Widget};

use crate::layout::centered;
use crate::visible::{Piece, make_visible, visible_pieces};
use wrap::wrap;

/// A Host Escalation request as the modal shows it: plain data the app
/// copies from the core's types.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApprovalRequest {
    pub id: String,
    pub profile: String,
    /// The agent's reason, as it wrote it.
    pub justification: String,
    /// The full command, as it would run.
    pub command: String,
    /// Whether it would run through a shell (`sh -c`) rather than as an
    /// argument vector.
    pub via_shell: bool,
    /// A line from the checker, e.g. why it was not auto-approved or that
    /// an edited command was re-checked.
    pub note: Option<String>,
    /// Files of the agent's that the command's program would execute,
    /// changed by the agent (e.g. `Makefile, changed in ec45301`).
    pub reads: Vec<String>,
    /// `lazaret review`'s findings, sent when `reads` names anything.
    pub review: Vec<String>,
    /// The review is shown (the human pressed `l`).
    pub review_shown: bool,
    /// The command is the human's edit, not the agent's.
    pub edited: bool,
    /// The letters that approve (typed one by one).
    pub code: String,
}

/// Scroll position of the modal's body, kept by the app between frames;
/// a fresh one for each request, so "seen" means seen for that request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApprovalView {
    scroll: u16,
    max_scroll: u16,
    seen_end: bool,
    /// Body rows shown by the last render, and the body's length.
    window: u16,
    total: u16,
}

impl ApprovalView {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn scroll_up(&mut self, rows: u16) {
        self.scroll = self.scroll.saturating_sub(rows);
    }

    /// Scrolls down, up to the end known from the last render.
    pub fn scroll_down(&mut self, rows: u16) {
        self.scroll = self.scroll.saturating_add(rows).min(self.max_scroll);
    }

    pub fn scroll(&self) -> u16 {
        self.scroll
    }

    /// Shows the body from row `row` at the next render (clamped there).
    pub fn set_scroll(&mut self, row: u16) {
        self.scroll = row;
    }

    /// Body rows the last render showed at once.
    pub fn window(&self) -> u16 {
        self.window
    }

    /// The body's rows at the last render's width.
    pub fn total(&self) -> u16 {
        self.total
    }

    /// Whether the last line of the request has been on screen. The app
    /// may refuse approval until it has.
    pub fn seen_whole_request(&self) -> bool {
        self.seen_end
    }
}

/// The modal: the command first, what of the agent's it would run, the
/// justification, then request id, profile and shell, with the key hints:
/// type the code to approve & run, d deny, e edit, q abort, Esc later.
/// With an editor it shows the command editor instead of the body.
#[derive(Clone, Copy, Debug)]
pub struct ApprovalModal<'a> {
    request: &'a ApprovalRequest,
    editor: Option<(&'a CommandEditor, EditPurpose)>,
    held: bool,
    /// Letters of the code typed so far.
    typed: usize,
    /// Why the last key did nothing, or what it meant.
    note: Option<&'a str>,
    /// Abort was asked for: what it would end, to be confirmed.
    confirming_abort: Option<&'a str>,
}

/// What the editor of the modal is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EditPurpose {
    /// E: the command, approved (after a re-check) on Enter.
    Command,
    /// D: an optional reason for the agent, sent with the denial on Enter.
    DenyReason,
}

impl<'a> ApprovalModal<'a> {
    pub fn new(request: &'a ApprovalRequest) -> Self {
        Self {
            request,
            editor: None,
            held: false,
            typed: 0,
            note: None,
            confirming_abort: None,
        }
    }

    /// `n` letters of the code are typed.
    #[must_use]
    pub fn typed(mut self, n: usize) -> Self {
        self.typed = n;
        self
    }

    /// A line saying why the last key did nothing, shown above the hints.
    #[must_use]
    pub fn note(mut self, note: Option<&'a str>) -> Self {
        self.note = note;
        self
    }

    /// Abort waits for `y`: the hints say what it ends.
    #[must_use]
    pub fn confirming_abort(mut self, ends: &'a str) -> Self {
        self.confirming_abort = Some(ends);
        self
    }

    /// The keys are not taken yet (the modal just opened): the hints say
    /// so instead of offering the keys, so that keys typed before the
    /// human saw the request cannot answer it.
    #[must_use]
    pub fn held(mut self, held: bool) -> Self {
        self.held = held;
        self
    }

    /// Shows `editor` (edit mode) instead of the read-only body.
    #[must_use]
    pub fn editing(mut self, editor: &'a CommandEditor) -> Self {
        self.editor = Some((editor, EditPurpose::Command));
        self
    }

    /// Shows `editor` as the reason of a denial being written.
    #[must_use]
    pub fn denying(mut self, editor: &'a CommandEditor) -> Self {
        self.editor = Some((editor, EditPurpose::DenyReason));
        self
    }
}

const LABEL_WIDTH: u16 = 9;

fn label_style() -> Style {
    Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)
}

/// Placeholders stand out so that literal text can never pass for one.
fn hidden_style() -> Style {
    Style::new()
        .fg(Color::White)
        .bg(Color::Red)
        .add_modifier(Modifier::BOLD)
}

/// The command on its own background, so spaces at a line end are seen.
fn command_style() -> Style {
    Style::new()
        .fg(Color::White)
        .bg(Color::DarkGray)
        .add_modifier(Modifier::BOLD)
}

/// Spans of `text` made visible, placeholders in [`hidden_style`].
fn visible_spans(text: &str, style: Style) -> (Vec<Span<'static>>, bool) {
    let mut replaced = false;
    let spans = visible_pieces(text)
        .into_iter()
        .map(|piece| match piece {
            Piece::Text(t) => Span::styled(t, style),
            Piece::Placeholder(p) => {
                replaced = true;
                Span::styled(p, hidden_style())
            }
        })
        .collect();
    (spans, replaced)
}

/// "Label    value" wrapped with the value's continuation lines aligned.
fn field(label: &str, value: &[Span<'static>], width: u16) -> Vec<Line<'static>> {
    let label = format!("{label:<w$}", w = usize::from(LABEL_WIDTH));
    wrap(
        vec![Span::styled(label, label_style())],
        value,
        LABEL_WIDTH,
        width,
        hidden_style(),
    )
}

/// The scrollable body of the read-only modal: the command on its first
/// row, then what it would run of the agent's, then why and who.
fn body(request: &ApprovalRequest, width: u16) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    let plain = |text: &str| vec![Span::raw(make_visible(text).0)];
    let label = if request.edited {
        "Command, as you edited it (exactly what runs)"
    } else {
        "Command (exactly what runs)"
    };
    lines.push(Line::from(Span::styled(label, label_style())));
    let (command, command_hidden) = visible_spans(&request.command, command_style());
    lines.extend(wrap(
        vec![Span::raw("  ")],
        &command,
        2,
        width,
        hidden_style(),
    ));
    if !request.reads.is_empty() {
        let alarm = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
        lines.push(Line::from(Span::styled(
            "Runs the agent's code: approving executes files the agent changed",
            alarm,
        )));
        for read in &request.reads {
            let (spans, _) = visible_spans(read, Style::new().fg(Color::Yellow));
            lines.extend(wrap(
                vec![Span::raw("  • ")],
                &spans,
                4,
                width,
                hidden_style(),
            ));
        }
        if request.review_shown {
            lines.push(Line::from(Span::styled(
                "What `lazaret review` finds (l hides it)",
                label_style(),
            )));
            for line in &request.review {
                let (spans, _) = visible_spans(line, Style::new());
                lines.extend(wrap(
                    vec![Span::raw("  ")],
                    &spans,
                    2,
                    width,
                    hidden_style(),
                ));
            }
        } else {
            let hint = if request.review.is_empty() {
                "`lazaret review` in the workspace lists every change"
            } else {
                "l shows what `lazaret review` finds"
            };
            lines.extend(wrap(
                vec![Span::raw("  ")],
                &[Span::styled(hint, Style::new().fg(Color::DarkGray))],
                2,
                width,
                hidden_style(),
            ));
        }
    }

    lines.push(Line::from(Span::styled("Justification", label_style())));
    let (why, why_hidden) = visible_spans(&request.justification, Style::new());
    lines.extend(wrap(vec![Span::raw("  ")], &why, 2, width, hidden_style()));

    lines.extend(field("Request", &plain(&request.id), width));
    lines.extend(field("Profile", &plain(&request.profile), width));
    let shell = if request.via_shell {
        Span::styled(
            "YES: runs through a shell; metacharacters apply",
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        )
    } else {
        Span::styled(
            "no: runs as an argument list",
            Style::new().fg(Color::Green),
        )
    };
    lines.extend(field("Shell", &[shell], width));
    if let Some(note) = &request.note {
        let (spans, _) = visible_spans(note, Style::new().fg(Color::Yellow));
        lines.extend(field("Note", &spans, width));
    }
    if command_hidden || why_hidden {
        let warning = Span::styled(
            "! Hidden characters (control, escape, bidi, zero-width) are shown as ␛ ^X <U+XXXX>.",
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        );
        lines.extend(wrap(vec![], &[warning], 2, width, hidden_style()));
    }
    lines
}

/// Key hints laid out as chips that wrap onto more lines when narrow.
fn hints(items: &[(&str, &str, Color)], width: u16) -> Vec<Line<'static>> {
    let mut lines = vec![Line::default()];
    let mut used = 0u16;
    for (key, action, color) in items {
        let chip_width =
            u16::try_from(key.chars().count() + action.chars().count() + 4).unwrap_or(u16::MAX);
        if used > 0 && used + 2 + chip_width > width {
            lines.push(Line::default());
            used = 0;
        }
        let line = lines.last_mut().expect("lines starts non-empty");
        if used > 0 {
            line.spans.push(Span::raw("  "));
            used += 2;
        }
        line.spans.push(Span::styled(
            format!("[{key}]"),
            Style::new()
                .fg(Color::Black)
                .bg(*color)
                .add_modifier(Modifier::BOLD),
        ));
        line.spans.push(Span::raw(format!(" {action}")));
        used += chip_width;
    }
    lines
}

/// The modal's width in `area` (the pane): nearly its full width, up to 100
/// columns; all of a narrow pane.
fn modal_width(area: Rect) -> u16 {
    area.width.saturating_sub(4).clamp(area.width.min(30), 100)
}

/// The modal's rectangle: as tall as the content needs, never larger than
/// `area`.
fn modal_rect(area: Rect, content_height: usize) -> Rect {
    let width = modal_width(area);
    let height = u16::try_from(content_height.saturating_add(2)).unwrap_or(u16::MAX);
    centered(area, width, height)
}

impl StatefulWidget for ApprovalModal<'_> {
    type State = ApprovalView;

    fn render(self, area: Rect, buf: &mut Buffer, state: &mut ApprovalView) {
        let area = area.intersection(buf.area);
        match self.editor {
            Some((editor, purpose)) => render_editing(self.request, editor, purpose, area, buf),
            None => render_request(&self, area, buf, state),
        }
    }
}

fn frame_block(title: String) -> Block<'static> {
    Block::bordered()
        .border_type(BorderType::Thick)
        .border_style(Style::new().fg(Color::Yellow))
        .title(Span::styled(
            title,
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ))
}

/// The hints of a request being read: the code only once it was seen
/// whole, and what was typed of it.
fn request_hints(modal: &ApprovalModal<'_>, seen: bool) -> Vec<(String, String, Color)> {
    let request = modal.request;
    if let Some(ends) = modal.confirming_abort {
        return vec![
            (
                "y".into(),
                format!("abort: deny, and end {ends}"),
                Color::Magenta,
            ),
            ("any other key".into(), "no".into(), Color::Cyan),
        ];
    }
    let approve = if !seen {
        (
            "↓ PgDn".into(),
            "read to the end to approve".into(),
            Color::Cyan,
        )
    } else if modal.typed > 0 {
        let typed: String = request.code.chars().take(modal.typed).collect();
        let rest = "_".repeat(request.code.chars().count().saturating_sub(modal.typed));
        (
            format!("type {}", request.code),
            format!("approve & run · typed: {typed}{rest}"),
            Color::Green,
        )
    } else {
        (
            format!("type {}", request.code),
            "approve & run".into(),
            Color::Green,
        )
    };
    let mut items = vec![
        approve,
        ("d".into(), "deny".into(), Color::Red),
        ("e".into(), "edit".into(), Color::Yellow),
        ("q".into(), "abort".into(), Color::Magenta),
        ("Esc".into(), "later (it waits)".into(), Color::Cyan),
    ];
    if !seen {
        items.remove(2);
    }
    items
}

fn render_request(
    modal: &ApprovalModal<'_>,
    area: Rect,
    buf: &mut Buffer,
    view: &mut ApprovalView,
) {
    let (request, held) = (modal.request, modal.held);
    let inner_width = modal_width(area).saturating_sub(2);
    if inner_width == 0 {
        Clear.render(area, buf);
        return;
    }
    let body = body(request, inner_width);
    let chips = |items: &[(String, String, Color)]| {
        let items: Vec<(&str, &str, Color)> = items
            .iter()
            .map(|(k, a, c)| (k.as_str(), a.as_str(), *c))
            .collect();
        let mut lines = hints(&items, inner_width);
        if let Some(note) = modal.note {
            let (spans, _) = visible_spans(
                note,
                Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
            );
            let mut note = wrap(vec![], &spans, 0, inner_width, hidden_style());
            note.extend(lines);
            lines = note;
        }
        lines
    };
    // Laid out for the longer of the two footers (before and after the
    // end was seen), so the modal does not jump when the end is reached.
    let body_len = u16::try_from(body.len()).unwrap_or(u16::MAX);
    let tallest = |scroll: bool| {
        [false, true]
            .iter()
            .map(|seen| {
                let mut items = request_hints(modal, *seen);
                if scroll {
                    items.push(("↑↓".into(), "scroll".into(), Color::Cyan));
                }
                chips(&items).len()
            })
            .max()
            .unwrap_or(0)
    };
    let rect = modal_rect(area, body.len() + 1 + tallest(false));
    let inner_height = rect.height.saturating_sub(2);
    // The key hints stay visible; the body scrolls above them.
    let rows = |n: usize| inner_height.saturating_sub(u16::try_from(n + 1).unwrap_or(u16::MAX));
    let mut body_height = rows(tallest(false));
    let scrolls = body_height < body_len;
    if scrolls {
        body_height = rows(tallest(true));
    }
    view.max_scroll = body_len.saturating_sub(body_height);
    view.window = body_height.min(body_len);
    view.total = body_len;
    view.scroll = view.scroll.min(view.max_scroll);
    if body_height > 0 && view.scroll + body_height >= body_len {
        view.seen_end = true;
    }
    let mut footer = request_hints(modal, view.seen_end);
    if scrolls {
        footer.push(("↑↓".into(), "scroll".into(), Color::Cyan));
    }
    let mut footer_lines = chips(&footer);
    if held {
        // Same height, so the modal does not jump when the keys arm.
        let text = "keys held a moment: keys typed before you saw it cannot answer it";
        let width = usize::from(inner_width);
        let mut held_lines = vec![
            Line::default(),
            Line::from(Span::styled(
                text.chars().take(width).collect::<String>(),
                Style::new().fg(Color::DarkGray),
            )),
        ];
        held_lines.resize(footer_lines.len().max(2), Line::default());
        footer_lines = held_lines;
    }

    let mut block = frame_block(format!(
        " Host escalation request {} ",
        make_visible(&request.id).0
    ));
    if view.max_scroll > 0 {
        let last = (view.scroll + body_height).min(body_len);
        // Approving and editing wait until the end has been on screen:
        // say how to get there.
        let mut text = format!(" lines {}-{last} of {body_len} ", view.scroll + 1);
        let more = "· ↓ to the end before approving ";
        if !view.seen_end
            && text.chars().count() + more.chars().count() + 4 <= usize::from(rect.width)
        {
            text += more;
        }
        block = block.title_bottom(Line::from(text).right_aligned());
    }
    Clear.render(rect, buf);
    let inner = block.inner(rect);
    block.render(rect, buf);

    let body_rect = Rect {
        height: body_height.min(inner.height),
        ..inner
    };
    Paragraph::new(body)
        .scroll((view.scroll, 0))
        .render(body_rect, buf);
    let footer_height = u16::try_from(footer_lines.len())
        .unwrap_or(u16::MAX)
        .min(inner.height);
    let footer_rect = Rect {
        y: inner.bottom() - footer_height,
        height: footer_height,
        ..inner
    };
    Paragraph::new(footer_lines).render(footer_rect, buf);
}

fn render_editing(
    request: &ApprovalRequest,
    editor: &CommandEditor,
    purpose: EditPurpose,
    area: Rect,
    buf: &mut Buffer,
) {
    let inner_width = modal_width(area).saturating_sub(2);
    if inner_width == 0 {
        Clear.render(area, buf);
        return;
    }
    let shell = if request.via_shell { "YES" } else { "no" };
    let mut header = field(
        "Profile",
        &[Span::raw(format!(
            "{} · shell: {shell}",
            make_visible(&request.profile).0
        ))],
        inner_width,
    );
    let (title, enter) = match purpose {
        EditPurpose::Command => (
            "Edit command",
            ("Enter", "approve & run edited", Color::Green),
        ),
        EditPurpose::DenyReason => {
            // What is being denied stays in view, and what Enter does.
            let (command, _) = visible_spans(&request.command, command_style());
            header.extend(field("Denying", &command, inner_width));
            header.push(Line::from(Span::styled(
                "Reason for the agent (optional):",
                label_style(),
            )));
            ("Deny", ("Enter", "deny with this reason", Color::Red))
        }
    };
    let footer = hints(&[enter, ("Esc", "back", Color::Cyan)], inner_width);
    let edit_rows = editor.display_rows(inner_width).max(3);
    let rect = modal_rect(area, header.len() + edit_rows + 1 + footer.len());
    Clear.render(rect, buf);
    let block = frame_block(format!(
        " {title} · request {} ",
        make_visible(&request.id).0
    ));
    let inner = block.inner(rect);
    block.render(rect, buf);

    let header_height = u16::try_from(header.len())
        .unwrap_or(u16::MAX)
        .min(inner.height);
    Paragraph::new(header).render(
        Rect {
            height: header_height,
            ..inner
        },
        buf,
    );
    let footer_height = u16::try_from(footer.len())
        .unwrap_or(u16::MAX)
        .min(inner.height - header_height);
    let footer_rect = Rect {
        y: inner.bottom() - footer_height,
        height: footer_height,
        ..inner
    };
    Paragraph::new(footer).render(footer_rect, buf);
    let edit_rect = Rect {
        y: inner.y + header_height,
        height: inner.height - header_height - footer_height,
        ..inner
    };
    // One blank row between editor and hints when there is room for it.
    let edit_rect = if edit_rect.height > 2 {
        Rect {
            height: edit_rect.height - 1,
            ..edit_rect
        }
    } else {
        edit_rect
    };
    editor.render(edit_rect, buf);
}

#[cfg(test)]
mod tests;
