//! The "new tab" dialog: the human picks a profile (its runtime shown, and
//! anything but gVisor shown loudly) and the workspace directory, then
//! opens the tab. [`NewTabForm`] is the state and its key handling;
//! [`NewTabDialog`] draws it centred over the workbench.

use ratatui::buffer::{Buffer, CellWidth as _};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Block, BorderType, Cell, Clear, HighlightSpacing, Padding, Paragraph, Row, StatefulWidget,
    Table, TableState, Widget,
};

use super::{keep_end, shown};
use crate::layout::centered;
use crate::modal::wrap::wrap;
use crate::modal::{CommandEditor, EditOutcome};

/// A profile the new tab can run, as the dialog lists it: plain data the
/// app copies from the core's profiles.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProfileChoice {
    pub name: String,
    /// The runtime its Agent Sandbox runs under, e.g. `gVisor (runsc)` or
    /// `runc`.
    pub runtime: String,
    /// Whether that runtime is gVisor; anything else is shown as an alarm.
    pub gvisor: bool,
    /// What the tab runs, e.g. `claude` or `login shell`.
    pub command: String,
}

/// The field that has the keyboard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NewTabField {
    Profile,
    Workspace,
}

/// What a key did in the form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FormOutcome {
    /// Still open.
    Editing,
    /// Esc: close the dialog, open nothing.
    Cancel,
    /// Enter: open a tab with this profile (its name exactly as given) in
    /// this workspace (trimmed, never empty). The app checks the directory
    /// and, when it is wrong, keeps the dialog open with
    /// [`NewTabForm::set_error`].
    Submit { profile: String, workspace: String },
}

/// The state of the new-tab dialog: the profiles, the selected one, the
/// workspace field and an error line.
///
/// Keys: Up/Down change the profile while the list has the focus (Down
/// past the last one moves to the workspace field, Up from that field moves
/// back); Tab and Shift-Tab switch fields; Enter opens; Esc cancels.
#[derive(Clone, Debug)]
pub struct NewTabForm {
    profiles: Vec<ProfileChoice>,
    selected: usize,
    focus: NewTabField,
    workspace: CommandEditor,
    error: Option<String>,
}

impl NewTabForm {
    /// A form on `profiles` with `selected` chosen (clamped to the list)
    /// and the workspace field holding `workspace`, cursor at its end. The
    /// profile list has the focus.
    ///
    /// Like the approval modal's editor, the field starts from `workspace`
    /// made visible: what the human sees is what is submitted.
    pub fn new(profiles: Vec<ProfileChoice>, selected: usize, workspace: &str) -> Self {
        let selected = selected.min(profiles.len().saturating_sub(1));
        Self {
            profiles,
            selected,
            focus: NewTabField::Profile,
            workspace: CommandEditor::new(workspace)
                .single_line("a directory on the host")
                .suggesting(),
            error: None,
        }
    }

    /// Handles one key. Any change to the profile or the path clears the
    /// error line.
    pub fn handle_key(&mut self, key: KeyEvent) -> FormOutcome {
        if key.kind == KeyEventKind::Release {
            return FormOutcome::Editing;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match (key.code, self.focus) {
            (KeyCode::Esc, _) => return FormOutcome::Cancel,
            (KeyCode::Char('c'), _) if ctrl => return FormOutcome::Cancel,
            // Ctrl+M and Ctrl+J are Enter too, as in the command editor.
            (KeyCode::Enter, _) => return self.submit(),
            (KeyCode::Char('m' | 'j'), _) if ctrl => return self.submit(),
            (KeyCode::Tab | KeyCode::BackTab, _) => self.toggle_focus(),
            (KeyCode::Up, NewTabField::Profile) => self.select(self.selected.saturating_sub(1)),
            (KeyCode::Down, NewTabField::Profile) => {
                if self.selected + 1 < self.profiles.len() {
                    self.select(self.selected + 1);
                } else {
                    self.focus = NewTabField::Workspace;
                }
            }
            (KeyCode::Home, NewTabField::Profile) => self.select(0),
            (KeyCode::End, NewTabField::Profile) => {
                self.select(self.profiles.len().saturating_sub(1));
            }
            (KeyCode::Up, NewTabField::Workspace) => self.focus = NewTabField::Profile,
            // The field is one line, and the list takes no text.
            (KeyCode::Down, NewTabField::Workspace) | (_, NewTabField::Profile) => {}
            (_, NewTabField::Workspace) => {
                let before = self.workspace.text();
                match self.workspace.handle_key(key) {
                    EditOutcome::Editing => {}
                    EditOutcome::Submit(_) => return self.submit(),
                    EditOutcome::Cancel => return FormOutcome::Cancel,
                }
                if self.workspace.text() != before {
                    self.error = None;
                }
            }
        }
        FormOutcome::Editing
    }

    /// Pastes `text` at the workspace field's cursor, newlines removed and
    /// other hidden characters made visible; the field gets the focus
    /// whichever had it.
    pub fn paste(&mut self, text: &str) {
        let text: String = text.chars().filter(|c| !matches!(c, '\n' | '\r')).collect();
        self.focus = NewTabField::Workspace;
        if !text.is_empty() {
            self.workspace.paste(&text);
            self.error = None;
        }
    }

    /// Shows `msg` under the workspace field, e.g. after a [`FormOutcome::Submit`]
    /// the app refused ("no such directory"); the dialog stays open.
    /// A message of several lines (a configuration's problems) becomes one
    /// wrapped paragraph: the field is a paragraph, not a terminal.
    pub fn set_error(&mut self, msg: impl Into<String>) {
        let msg: String = msg.into();
        let joined = msg
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        self.error = Some(joined);
    }

    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// The index of the selected profile (0 when there are none).
    pub fn selected(&self) -> usize {
        self.selected
    }

    /// The workspace field as it stands, untrimmed.
    pub fn workspace(&self) -> String {
        self.workspace.text()
    }

    pub fn focus(&self) -> NewTabField {
        self.focus
    }

    fn toggle_focus(&mut self) {
        self.focus = match self.focus {
            NewTabField::Profile => NewTabField::Workspace,
            NewTabField::Workspace => NewTabField::Profile,
        };
    }

    fn select(&mut self, index: usize) {
        if index != self.selected {
            self.selected = index;
            self.error = None;
        }
    }

    fn submit(&mut self) -> FormOutcome {
        let Some(profile) = self.profiles.get(self.selected) else {
            self.error = Some("No profile to open: add one to the configuration.".into());
            return FormOutcome::Editing;
        };
        let workspace = self.workspace.text().trim().to_string();
        if workspace.is_empty() {
            self.error = Some("Enter the workspace directory.".into());
            self.focus = NewTabField::Workspace;
            return FormOutcome::Editing;
        }
        FormOutcome::Submit {
            profile: profile.name.clone(),
            workspace,
        }
    }
}

/// The dialog, drawn centred over `area` (the workbench), clearing what it
/// covers. The workspace field draws its own cursor: the app should not
/// place the terminal's.
#[derive(Clone, Copy, Debug)]
pub struct NewTabDialog<'a> {
    form: &'a NewTabForm,
}

impl<'a> NewTabDialog<'a> {
    pub fn new(form: &'a NewTabForm) -> Self {
        Self { form }
    }
}

/// The footer's keys, as "Up/Down profile · Tab field · Enter open · Esc
/// cancel" wrapped between items when narrow.
const KEYS: [(&str, &str); 4] = [
    ("Up/Down", "profile"),
    ("Tab", "field"),
    ("Enter", "open"),
    ("Esc", "cancel"),
];

/// Columns between the profile table's columns.
const SPACING: usize = 2;
/// The selected profile's marker.
const MARK: &str = "› ";
/// The narrowest command column worth showing: `runs clau`.
const MIN_COMMAND: usize = 9;

fn text_width(text: &str) -> usize {
    usize::from(text.cell_width())
}

fn label_style(focused: bool) -> Style {
    if focused {
        Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)
    } else {
        Style::new().add_modifier(Modifier::BOLD)
    }
}

/// The workspace field, on its own background so its extent shows.
fn field_style() -> Style {
    Style::new().fg(Color::White).bg(Color::DarkGray)
}

fn alarm_style() -> Style {
    Style::new()
        .fg(Color::White)
        .bg(Color::Red)
        .add_modifier(Modifier::BOLD)
}

fn runtime_label(profile: &ProfileChoice) -> String {
    if profile.gvisor {
        shown(&profile.runtime)
    } else {
        format!("NOT gVisor: {}", shown(&profile.runtime))
    }
}

fn footer(width: u16) -> Vec<Line<'static>> {
    super::key_footer(&KEYS, usize::from(width))
}

/// Column widths of the profile table in `width` columns (after the
/// marker): the runtime label is cut last, the command first.
fn column_widths(profiles: &[ProfileChoice], width: usize) -> (usize, usize, usize) {
    let name = profiles
        .iter()
        .map(|p| text_width(&shown(&p.name)))
        .max()
        .unwrap_or(0)
        .min(24);
    let runtime = profiles
        .iter()
        .map(|p| text_width(&runtime_label(p)))
        .max()
        .unwrap_or(0);
    let command = profiles
        .iter()
        .map(|p| text_width(&format!("runs {}", shown(&p.command))))
        .max()
        .unwrap_or(0);
    // The name keeps at least 8 columns (or all of it) before the runtime
    // label is cut; its colour still says "not gVisor" when it is.
    let name = name.min(
        width
            .saturating_sub(SPACING + runtime)
            .max(name.min(8))
            .min(width),
    );
    let runtime = runtime.min(width.saturating_sub(name + SPACING));
    // A few columns of a command say nothing: then there is no column.
    let room = width.saturating_sub(name + runtime + 2 * SPACING);
    let command = if room >= MIN_COMMAND {
        command.min(room)
    } else {
        0
    };
    (name, runtime, command)
}

/// How many rows each part of the dialog gets, top to bottom.
#[derive(Clone, Copy, Debug)]
struct Rows {
    profile_label: u16,
    list: u16,
    gap_above_workspace: u16,
    workspace_label: u16,
    workspace: u16,
    error: u16,
    gap_above_footer: u16,
    footer: u16,
}

impl Rows {
    fn total(&self) -> u16 {
        [
            self.profile_label,
            self.list,
            self.gap_above_workspace,
            self.workspace_label,
            self.workspace,
            self.error,
            self.gap_above_footer,
            self.footer,
        ]
        .into_iter()
        .fold(0, u16::saturating_add)
    }

    /// Drops parts, least useful first, until the rows fit in `height`:
    /// the blank rows, profiles other than the selected one, the labels,
    /// the key hints, the error, and last the profile and the field.
    fn fit(mut self, height: u16) -> Self {
        for step in 0.. {
            let excess = self.total().saturating_sub(height);
            if excess == 0 {
                break;
            }
            match step {
                0 => self.gap_above_footer = 0,
                1 => self.gap_above_workspace = 0,
                2 => self.list = self.list.saturating_sub(excess).max(self.list.min(1)),
                3 => self.profile_label = 0,
                4 => self.footer = self.footer.saturating_sub(excess),
                5 => self.workspace_label = 0,
                6 => self.error = self.error.saturating_sub(excess),
                7 => self.list = 0,
                _ => self.workspace = 0,
            }
        }
        self
    }
}

impl Widget for NewTabDialog<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let form = self.form;
        let area = area.intersection(buf.area);
        let block = Block::bordered()
            .border_type(BorderType::Rounded)
            .border_style(Style::new().fg(Color::Cyan))
            .padding(Padding::horizontal(1))
            .title(Span::styled(
                " New tab ",
                Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
            ));

        // Width: what the content wants, within the area.
        let marker = text_width(MARK);
        let (name_w, runtime_w, command_w) = column_widths(&form.profiles, usize::MAX / 4);
        let list_w = marker + name_w + SPACING + runtime_w + SPACING + command_w;
        let path_w = text_width(&shown(&form.workspace.text())) + 1;
        let footer_w = footer(u16::MAX).iter().map(Line::width).max().unwrap_or(0);
        let content_w = u16::try_from(list_w.max(path_w).max(footer_w) + 4).unwrap_or(u16::MAX);
        let max_w = area.width.saturating_sub(4).clamp(area.width.min(30), 100);
        let width = content_w.clamp(50.min(max_w), max_w);
        let inner_w = block.inner(Rect::new(0, 0, width, 3)).width;

        let footer_lines = footer(inner_w);
        let error_lines = form
            .error
            .as_deref()
            .map(|e| {
                let text = Span::styled(
                    shown(e),
                    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
                );
                wrap(
                    vec![Span::styled("! ", text.style)],
                    &[text],
                    2,
                    inner_w,
                    alarm_style(),
                )
            })
            .unwrap_or_default();
        let to_u16 = |n: usize| u16::try_from(n).unwrap_or(u16::MAX);
        let wanted = Rows {
            profile_label: 1,
            list: to_u16(form.profiles.len().max(1)),
            gap_above_workspace: 1,
            workspace_label: 1,
            workspace: 1,
            error: to_u16(error_lines.len()),
            gap_above_footer: 1,
            footer: to_u16(footer_lines.len()),
        };
        let rect = centered(area, width, wanted.total().saturating_add(2));
        Clear.render(rect, buf);
        let inner = block.inner(rect);
        block.render(rect, buf);
        let rows = wanted.fit(inner.height);

        let mut y = inner.y;
        let mut take = |height: u16| {
            let r = Rect { y, height, ..inner };
            y += height;
            r
        };
        let profile_focused = form.focus == NewTabField::Profile;
        let workspace_focused = form.focus == NewTabField::Workspace;

        let mut label = vec![Span::styled("Profile", label_style(profile_focused))];
        if usize::from(rows.list) < form.profiles.len() {
            label.push(Span::styled(
                format!(" {}/{}", form.selected + 1, form.profiles.len()),
                Style::new().fg(Color::DarkGray),
            ));
        }
        Paragraph::new(Line::from(label)).render(take(rows.profile_label), buf);
        render_list(form, take(rows.list), buf);
        take(rows.gap_above_workspace);
        Paragraph::new(Span::styled("Workspace", label_style(workspace_focused)))
            .render(take(rows.workspace_label), buf);
        let field = take(rows.workspace);
        if workspace_focused {
            form.workspace.render(field, buf);
        } else {
            let path = keep_end(&shown(&form.workspace.text()), usize::from(field.width));
            Paragraph::new(path).style(field_style()).render(field, buf);
        }
        Paragraph::new(error_lines).render(take(rows.error), buf);
        take(rows.gap_above_footer);
        Paragraph::new(footer_lines).render(take(rows.footer), buf);
    }
}

fn render_list(form: &NewTabForm, area: Rect, buf: &mut Buffer) {
    if area.is_empty() {
        return;
    }
    if form.profiles.is_empty() {
        Paragraph::new(Span::styled(
            "No profiles configured.",
            Style::new().fg(Color::DarkGray),
        ))
        .render(area, buf);
        return;
    }
    let width = usize::from(area.width).saturating_sub(text_width(MARK));
    let (name_w, runtime_w, command_w) = column_widths(&form.profiles, width);
    // The selection is loud while the list has the focus, a marker and bold
    // text otherwise. It is the row's own style, under the cells' styles,
    // so the runtime alarm stays white on red on the selected row too.
    let selected = if form.focus == NewTabField::Profile {
        Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD)
    } else {
        Style::new().add_modifier(Modifier::BOLD)
    };
    let rows = form.profiles.iter().enumerate().map(|(i, p)| {
        let runtime = if p.gvisor {
            Span::styled(runtime_label(p), Style::new().fg(Color::Green))
        } else {
            Span::styled(
                runtime_label(p),
                alarm_style().remove_modifier(Modifier::REVERSED),
            )
        };
        let mut cells = vec![Cell::from(shown(&p.name)), Cell::from(runtime)];
        if command_w > 0 {
            cells.push(Cell::from(Line::from(vec![
                Span::styled("runs ", Style::new().fg(Color::DarkGray)),
                Span::raw(shown(&p.command)),
            ])));
        }
        let row = Row::new(cells);
        if i == form.selected {
            row.style(selected)
        } else {
            row
        }
    });
    let to_u16 = |n: usize| u16::try_from(n).unwrap_or(u16::MAX);
    let mut widths = vec![
        Constraint::Length(to_u16(name_w)),
        Constraint::Length(to_u16(runtime_w)),
    ];
    if command_w > 0 {
        widths.push(Constraint::Length(to_u16(command_w)));
    }
    let table = Table::new(rows, widths)
        .column_spacing(to_u16(SPACING))
        .highlight_symbol(MARK)
        .highlight_spacing(HighlightSpacing::Always);
    let mut state = TableState::default().with_selected(Some(form.selected));
    StatefulWidget::render(table, area, buf, &mut state);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profiles() -> Vec<ProfileChoice> {
        ["claude", "aider", "shell"]
            .into_iter()
            .map(|name| ProfileChoice {
                name: name.into(),
                runtime: "gVisor (runsc)".into(),
                gvisor: true,
                command: name.into(),
            })
            .collect()
    }

    #[test]
    fn a_refusal_of_several_lines_is_one_paragraph() {
        let mut form = NewTabForm::new(profiles(), 0, "/w");
        form.set_error("1 problem in the configuration:\n  workspace: `/w/nope` cannot be used\n");
        assert_eq!(
            form.error(),
            Some("1 problem in the configuration: workspace: `/w/nope` cannot be used")
        );
    }

    #[test]
    fn rows_drop_the_least_useful_parts_first() {
        let rows = Rows {
            profile_label: 1,
            list: 5,
            gap_above_workspace: 1,
            workspace_label: 1,
            workspace: 1,
            error: 2,
            gap_above_footer: 1,
            footer: 2,
        };
        assert_eq!(rows.fit(14).total(), 14);
        let r = rows.fit(10);
        assert_eq!(
            (r.gap_above_footer, r.gap_above_workspace, r.list, r.footer),
            (0, 0, 3, 2)
        );
        let r = rows.fit(5);
        assert_eq!((r.list, r.profile_label, r.workspace_label), (1, 0, 1));
        assert_eq!((r.workspace, r.error, r.footer), (1, 2, 0));
        let r = rows.fit(1);
        assert_eq!((r.list, r.workspace, r.total()), (0, 1, 1));
        assert_eq!(rows.fit(0).total(), 0);
    }

    #[test]
    fn the_runtime_label_is_cut_after_the_command_and_the_name() {
        let mut p = profiles();
        p[1].gvisor = false;
        p[1].runtime = "runc".into();
        // "claude" 6, "NOT gVisor: runc" 16, "runs claude" 11.
        assert_eq!(column_widths(&p, 100), (6, 16, 11));
        assert_eq!(column_widths(&p, 30), (6, 16, 0));
        assert_eq!(column_widths(&p, 35), (6, 16, 9));
        assert_eq!(column_widths(&p, 20), (6, 12, 0));
        assert_eq!(column_widths(&p, 10), (6, 2, 0));
        assert_eq!(column_widths(&p, 0), (0, 0, 0));
        // A long name gives way to the runtime down to 8 columns.
        p[0].name = "a-rather-long-profile-name".into();
        assert_eq!(column_widths(&p, 30), (12, 16, 0));
        assert_eq!(column_widths(&p, 20), (8, 10, 0));
    }

    #[test]
    fn the_selection_is_clamped_and_an_empty_list_cannot_submit() {
        assert_eq!(NewTabForm::new(profiles(), 7, "/w").selected(), 2);
        let mut form = NewTabForm::new(Vec::new(), 3, "/w");
        assert_eq!(form.selected(), 0);
        assert_eq!(
            form.handle_key(KeyEvent::from(KeyCode::Enter)),
            FormOutcome::Editing
        );
        assert!(form.error().is_some());
    }
}
