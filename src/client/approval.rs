//! The approval prompt's state and rules, with no I/O (spec §5.2, issue 26):
//! the one thing the workbench's modal and the plain terminal's page both
//! render and feed keys to, so that arming, the seen-whole gate, editing,
//! denial and abort behave the same wherever the human answers.
//!
//! The two differ only in the act that approves ([`Approving`]): the
//! workbench reads its own keys (the agent's output never reaches the real
//! terminal, so no terminal reply can forge one) and takes `A`; the plain
//! terminal shares its input with the terminal's automatic replies, so it
//! takes a random code typed a key per read (decisions.md D10).

use std::time::Duration;

use lazaret_widgets::visible::make_visible;

use crate::coordinator::escalation::{Prompt, Verdict};

/// How long a prompt is on screen before its keys count: typing meant for
/// the sandbox when the prompt appeared is not an answer to it.
pub const ARMING: Duration = Duration::from_millis(800);

/// What approves the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approving {
    /// The `A` key (the workbench).
    Key,
    /// This code, typed one key per read (the plain terminal).
    Code(String),
}

/// A key as the prompt sees it, whichever terminal it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptKey {
    Char(char),
    Enter,
    Escape,
    Backspace,
    Delete,
    Left,
    Right,
    Home,
    End,
    /// Clear the line being edited (Ctrl-U).
    Kill,
    Up,
    Down,
    PageUp,
    PageDown,
    /// Several keys in one read (a paste, a terminal's reply): never an
    /// answer.
    Burst,
    /// Any other key (Tab, a function key): swallowed.
    Other,
}

/// What the human is doing with the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Reading,
    /// `E`: changing the command.
    Editing(LineEdit),
    /// `D`: writing an optional reason for the agent.
    Reason(LineEdit),
}

/// What a key did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Still asking.
    Asking,
    /// The human decided.
    Decided(Verdict),
}

/// One line of text being edited, with a cursor (in characters).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineEdit {
    text: Vec<char>,
    cursor: usize,
}

/// How an edit ended.
enum EditEnd {
    Submit(String),
    Cancel,
}

impl LineEdit {
    /// `text` with the cursor at its end.
    pub fn new(text: &str) -> Self {
        let text: Vec<char> = text.chars().collect();
        LineEdit {
            cursor: text.len(),
            text,
        }
    }

    pub fn text(&self) -> String {
        self.text.iter().collect()
    }

    /// The cursor, in characters from the start.
    pub fn cursor(&self) -> usize {
        self.cursor
    }

    /// Inserts `text` at the cursor, made visible: a line holds no control
    /// characters, so what the human submits is what they see.
    fn insert(&mut self, text: &str) {
        for c in make_visible(text).0.chars() {
            self.text.insert(self.cursor, c);
            self.cursor += 1;
        }
    }

    fn key(&mut self, key: PromptKey) -> Option<EditEnd> {
        match key {
            PromptKey::Enter => return Some(EditEnd::Submit(self.text())),
            PromptKey::Escape => return Some(EditEnd::Cancel),
            PromptKey::Char(c) if !c.is_control() => {
                self.text.insert(self.cursor, c);
                self.cursor += 1;
            }
            PromptKey::Backspace if self.cursor > 0 => {
                self.cursor -= 1;
                self.text.remove(self.cursor);
            }
            PromptKey::Delete if self.cursor < self.text.len() => {
                self.text.remove(self.cursor);
            }
            PromptKey::Left => self.cursor = self.cursor.saturating_sub(1),
            PromptKey::Right => self.cursor = (self.cursor + 1).min(self.text.len()),
            PromptKey::Home => self.cursor = 0,
            PromptKey::End => self.cursor = self.text.len(),
            PromptKey::Kill => *self = LineEdit::default(),
            _ => {}
        }
        None
    }
}

/// A request in front of the human, and how far they got with it.
#[derive(Debug, Clone)]
pub struct Approval {
    prompt: Prompt,
    approving: Approving,
    mode: Mode,
    /// The command the human edited, shown and run instead of the agent's.
    edited: Option<String>,
    armed: bool,
    /// Letters of the code typed so far.
    typed: usize,
    /// The first body row the human asked to see.
    scroll: usize,
    /// Body rows the last screen showed at once.
    window: usize,
    seen_end: bool,
    /// Reads ignored as bursts.
    ignored: usize,
    note: Option<String>,
}

impl Approval {
    pub fn new(prompt: Prompt, approving: Approving) -> Self {
        Approval {
            prompt,
            approving,
            mode: Mode::Reading,
            edited: None,
            armed: false,
            typed: 0,
            scroll: 0,
            window: 0,
            seen_end: false,
            ignored: 0,
            note: None,
        }
    }

    pub fn prompt(&self) -> &Prompt {
        &self.prompt
    }

    /// The request's id changed (the first of several identical requests
    /// was withdrawn and a copy takes its place): nothing else does.
    pub fn set_request_id(&mut self, id: String) {
        self.prompt.request_id = id;
    }

    pub fn approving(&self) -> &Approving {
        &self.approving
    }

    pub fn mode(&self) -> &Mode {
        &self.mode
    }

    /// Keys count from now on ([`ARMING`] after the prompt was drawn).
    pub fn arm(&mut self) {
        self.armed = true;
    }

    /// Keys stop counting (the prompt left the screen and will be shown
    /// again); what was typed of the code is forgotten.
    pub fn hold(&mut self) {
        self.armed = false;
        self.typed = 0;
    }

    pub fn armed(&self) -> bool {
        self.armed
    }

    /// The command that would run: the human's edit, else the agent's.
    pub fn command(&self) -> &str {
        self.edited.as_deref().unwrap_or(&self.prompt.command)
    }

    pub fn edited(&self) -> Option<&str> {
        self.edited.as_deref()
    }

    /// Whether the request's last row has been on screen: only then may
    /// the human approve or edit it.
    pub fn seen_whole_request(&self) -> bool {
        self.seen_end
    }

    pub fn typed(&self) -> usize {
        self.typed
    }

    pub fn ignored(&self) -> usize {
        self.ignored
    }

    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    /// The first body row to show.
    pub fn scroll(&self) -> usize {
        self.scroll
    }

    /// What the last screen showed: rows `first..first + rows` of `total`.
    /// A renderer calls this after every layout; the request counts as
    /// seen whole once its last row was among them.
    pub fn showed(&mut self, first: usize, rows: usize, total: usize) {
        self.scroll = first;
        self.window = rows;
        if rows > 0 && first + rows >= total {
            self.seen_end = true;
        }
    }

    /// Pasted text: into the line being edited; nothing while reading.
    pub fn paste(&mut self, text: &str) {
        if let Mode::Editing(line) | Mode::Reason(line) = &mut self.mode {
            let first = text.split(['\r', '\n']).next().unwrap_or_default();
            line.insert(first);
        }
    }

    /// The human pressed `key`.
    pub fn key(&mut self, key: PromptKey) -> Step {
        if !self.armed {
            // Held: neither an answer nor input for the sandbox.
            return Step::Asking;
        }
        // A note answers the key before: the next one takes it away.
        self.note = None;
        match std::mem::replace(&mut self.mode, Mode::Reading) {
            Mode::Reading => self.reading(key),
            Mode::Editing(mut line) => match line.key(key) {
                None => {
                    self.mode = Mode::Editing(line);
                    Step::Asking
                }
                Some(EditEnd::Cancel) => Step::Asking,
                Some(EditEnd::Submit(text)) => self.submit_edit(text, line),
            },
            Mode::Reason(mut line) => match line.key(key) {
                None => {
                    self.mode = Mode::Reason(line);
                    Step::Asking
                }
                Some(EditEnd::Cancel) => Step::Asking,
                Some(EditEnd::Submit(text)) => Step::Decided(Verdict::Deny {
                    reason: (!text.trim().is_empty()).then_some(text),
                }),
            },
        }
    }

    fn reading(&mut self, key: PromptKey) -> Step {
        let page = self.window.max(1);
        match key {
            PromptKey::Up => self.scroll = self.scroll.saturating_sub(1),
            PromptKey::Down => self.scroll = self.scroll.saturating_add(1),
            PromptKey::PageUp => self.scroll = self.scroll.saturating_sub(page),
            PromptKey::PageDown | PromptKey::Char(' ') => {
                self.scroll = self.scroll.saturating_add(page);
            }
            PromptKey::Burst => {
                self.typed = 0;
                self.ignored += 1;
            }
            PromptKey::Char(c) => return self.letter(c.to_ascii_lowercase()),
            _ => self.typed = 0,
        }
        Step::Asking
    }

    fn letter(&mut self, c: char) -> Step {
        // Inside a code, a letter is only ever the code's next one.
        if self.typed > 0 {
            return self.code_letter(c);
        }
        match c {
            'd' => {
                self.mode = Mode::Reason(LineEdit::default());
                Step::Asking
            }
            'q' => Step::Decided(Verdict::Abort),
            'e' if self.gate() => {
                // The line starts from what the human saw: hidden characters
                // come back as their visible placeholders.
                self.mode = Mode::Editing(LineEdit::new(&make_visible(self.command()).0));
                Step::Asking
            }
            'a' if self.approving == Approving::Key && self.gate() => {
                Step::Decided(self.approval())
            }
            'e' | 'a' => Step::Asking,
            c => self.code_letter(c),
        }
    }

    fn code_letter(&mut self, c: char) -> Step {
        let Approving::Code(code) = &self.approving else {
            return Step::Asking;
        };
        let (next, len) = (code.chars().nth(self.typed), code.chars().count());
        // Any letter before the end was read says how to get there.
        if !self.gate() || next != Some(c) {
            self.typed = 0;
            return Step::Asking;
        }
        self.typed += 1;
        if self.typed == len {
            Step::Decided(self.approval())
        } else {
            Step::Asking
        }
    }

    /// Whether the whole request has been on screen; says how to get
    /// there when not.
    fn gate(&mut self) -> bool {
        if !self.seen_end {
            self.note = Some("read the whole request first: ↓, PgDn or Space to its end".into());
        }
        self.seen_end
    }

    fn approval(&self) -> Verdict {
        match &self.edited {
            Some(command) => Verdict::Edit {
                command: command.clone(),
            },
            None => Verdict::Approve,
        }
    }

    /// An edit was submitted. Unchanged: back to reading. Changed: in the
    /// workbench, Enter was the human's approval of exactly what they
    /// typed; on the plain terminal the edited command must be read to its
    /// end again and the code typed.
    fn submit_edit(&mut self, text: String, line: LineEdit) -> Step {
        if text.trim().is_empty() {
            self.mode = Mode::Editing(line);
            return Step::Asking;
        }
        let before = make_visible(self.command()).0;
        if text == before {
            return match self.approving {
                Approving::Key => Step::Decided(self.approval()),
                Approving::Code(_) => Step::Asking,
            };
        }
        match self.approving {
            Approving::Key => Step::Decided(Verdict::Edit { command: text }),
            Approving::Code(_) => {
                self.edited = Some(text);
                self.scroll = 0;
                self.seen_end = false;
                self.typed = 0;
                self.note =
                    Some("the edited command runs once you read it and type the code".into());
                Step::Asking
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(command: &str) -> Prompt {
        Prompt {
            request_id: "r-1".into(),
            session_id: "s-1".into(),
            profile: "dev".into(),
            cwd: "/workspace".into(),
            justification: "why".into(),
            command: command.into(),
            via_shell: false,
            reason: "matches no auto-approve entry".into(),
        }
    }

    fn keys(a: &mut Approval, keys: &str) -> Step {
        let mut last = Step::Asking;
        for c in keys.chars() {
            last = a.key(PromptKey::Char(c));
        }
        last
    }

    /// Both frontends, reading a request that fits: only their approving
    /// act differs.
    fn both(command: &str) -> [Approval; 2] {
        let mut a = [
            Approval::new(prompt(command), Approving::Key),
            Approval::new(prompt(command), Approving::Code("bcf".into())),
        ];
        for a in &mut a {
            a.showed(0, 10, 10);
        }
        a
    }

    #[test]
    fn held_keys_answer_nothing() {
        for mut a in both("ls") {
            assert_eq!(keys(&mut a, "abcfq"), Step::Asking);
            assert_eq!(a.mode(), &Mode::Reading);
            a.arm();
            assert_eq!(a.key(PromptKey::Char('q')), Step::Decided(Verdict::Abort));
        }
    }

    #[test]
    fn the_approving_act_is_the_only_difference() {
        let [mut key, mut code] = both("ls");
        key.arm();
        code.arm();
        // The workbench's A is nothing on the plain terminal, and the code
        // nothing in the workbench.
        assert_eq!(code.key(PromptKey::Char('a')), Step::Asking);
        assert_eq!(keys(&mut key, "bcf"), Step::Asking);
        assert_eq!(
            key.key(PromptKey::Char('A')),
            Step::Decided(Verdict::Approve)
        );
        assert_eq!(keys(&mut code, "bcf"), Step::Decided(Verdict::Approve));
    }

    #[test]
    fn a_wrong_letter_or_a_burst_restarts_the_code() {
        let [_, mut a] = both("ls");
        a.arm();
        keys(&mut a, "bc");
        a.key(PromptKey::Burst);
        assert_eq!(a.key(PromptKey::Char('f')), Step::Asking);
        keys(&mut a, "bcx");
        assert_eq!(a.typed(), 0);
        assert_eq!(keys(&mut a, "bcf"), Step::Decided(Verdict::Approve));
        assert_eq!(a.ignored(), 1);
    }

    #[test]
    fn nothing_approves_or_edits_before_the_end_was_seen() {
        for approving in [Approving::Key, Approving::Code("bcf".into())] {
            let approve = if approving == Approving::Key {
                "a"
            } else {
                "bcf"
            };
            let mut a = Approval::new(prompt(&"x".repeat(5000)), approving);
            a.arm();
            a.showed(0, 10, 80);
            assert_eq!(keys(&mut a, "abcfe"), Step::Asking);
            assert_eq!(a.mode(), &Mode::Reading);
            assert!(a.note().unwrap().contains("whole request"));
            // Deny and abort need no reading.
            a.key(PromptKey::Char('d'));
            assert!(matches!(a.mode(), Mode::Reason(_)));
            a.key(PromptKey::Escape);
            // Paging down to the end opens the gate.
            while !a.seen_whole_request() {
                a.key(PromptKey::PageDown);
                let first = a.scroll().min(70);
                a.showed(first, 10, 80);
            }
            assert_eq!(keys(&mut a, approve), Step::Decided(Verdict::Approve));
        }
    }

    #[test]
    fn an_edit_is_approved_by_enter_in_the_workbench_and_read_again_on_the_terminal() {
        let [mut key, mut code] = both("ls\u{1b}[2J");
        for a in [&mut key, &mut code] {
            a.arm();
            a.key(PromptKey::Char('e'));
            let Mode::Editing(line) = a.mode() else {
                panic!("not editing")
            };
            // The line holds what the human saw, hidden characters visible.
            assert_eq!(line.text(), "ls␛[2J");
            for _ in 0..4 {
                a.key(PromptKey::Backspace);
            }
            keys(a, " -la");
        }
        let edit = Verdict::Edit {
            command: "ls -la".into(),
        };
        assert_eq!(key.key(PromptKey::Enter), Step::Decided(edit.clone()));
        assert_eq!(code.key(PromptKey::Enter), Step::Asking);
        assert_eq!(code.command(), "ls -la");
        assert!(!code.seen_whole_request());
        assert_eq!(keys(&mut code, "bcf"), Step::Asking);
        code.showed(0, 10, 10);
        assert_eq!(keys(&mut code, "bcf"), Step::Decided(edit));
    }

    #[test]
    fn a_denial_carries_its_reason_and_escape_goes_back() {
        for mut a in both("ls") {
            a.arm();
            a.key(PromptKey::Char('d'));
            keys(&mut a, "no");
            a.key(PromptKey::Escape);
            assert_eq!(a.mode(), &Mode::Reading);
            a.key(PromptKey::Char('D'));
            a.paste("not\nthat");
            keys(&mut a, " now");
            assert_eq!(
                a.key(PromptKey::Enter),
                Step::Decided(Verdict::Deny {
                    reason: Some("not now".into())
                })
            );
        }
    }

    #[test]
    fn the_line_editor_moves_and_deletes() {
        let mut line = LineEdit::new("abc");
        for k in [
            PromptKey::Home,
            PromptKey::Delete,
            PromptKey::End,
            PromptKey::Left,
            PromptKey::Char('X'),
            PromptKey::Right,
            PromptKey::Char('\u{7}'),
        ] {
            line.key(k);
        }
        assert_eq!((line.text().as_str(), line.cursor()), ("bXc", 3));
        line.key(PromptKey::Kill);
        assert_eq!(line.text(), "");
    }
}
