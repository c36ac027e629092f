//! The approval prompt's state and rules, with no I/O (spec §5.2,
//! decisions.md D10 and D15): the one thing the workbench's modal and the
//! plain terminal's page both render and feed keys to, so that opening,
//! arming, the seen-whole gate, the code, editing, denial and abort behave
//! the same wherever the human answers.
//!
//! A request never takes the keyboard. Until the human deliberately turns
//! to it ([`Approval::open`]: the workbench's `C-a !`, a click, Enter on the
//! queue; the plain prompt, which stops the sandbox's output, opens at
//! once), every key is [`Step::Passed`] back to the pane it was meant for.
//! The agent sees the human's keystrokes arrive in its own terminal, so it
//! can time a request to land mid-sentence: nothing typed as prose may
//! answer it. Once open, approving takes a fresh random code of letters
//! that are no command key, typed one key at a time, after the request was
//! on screen to its end; deny is `d` then Enter, abort is `q` then `y`.

use std::time::{Duration, Instant};

use lazaret_widgets::visible::make_visible;

use crate::coordinator::escalation::{Prompt, Verdict};

/// How long an opened request is on screen before its keys count: keys
/// typed before the human saw it are not an answer to it.
pub const ARMING: Duration = Duration::from_millis(800);

/// A key as the prompt sees it, whichever terminal it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptKey {
    Char(char),
    Enter,
    /// Esc or Ctrl-C: back out of what is open.
    Cancel,
    Backspace,
    Delete,
    Left,
    Right,
    Home,
    End,
    /// Ctrl-U: delete from the cursor to the line's start.
    Kill,
    /// Ctrl-W: delete the word before the cursor.
    KillWord,
    /// Alt-B / Alt-F: a word back / forward.
    WordLeft,
    WordRight,
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
    /// `e`: changing the command.
    Editing(LineEdit),
    /// `d`: writing an optional reason for the agent; Enter denies.
    Reason(LineEdit),
    /// `q`: abort asks once more (`y`), as it ends the asking session.
    ConfirmAbort,
}

/// What a key did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The request is not open: the key belongs to the pane, untouched.
    Passed,
    /// Still asking.
    Asking,
    /// The human backed out without deciding (Esc or Ctrl-C while
    /// reading): the request is closed and still waits.
    Closed,
    /// The human decided.
    Decided(Verdict),
}

/// One line of text being edited, with a cursor (in characters), and the
/// keys of a terminal's line editor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineEdit {
    text: Vec<char>,
    cursor: usize,
    /// A suggestion Lazaret filled in: the first character typed replaces
    /// it, a movement key keeps it.
    suggested: bool,
}

/// How an edit ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditEnd {
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
            suggested: false,
        }
    }

    /// `text` as a suggestion: typing replaces it, C-u clears it, a
    /// movement key makes it the line to edit.
    pub fn suggested(text: &str) -> Self {
        LineEdit {
            suggested: !text.is_empty(),
            ..LineEdit::new(text)
        }
    }

    pub fn text(&self) -> String {
        self.text.iter().collect()
    }

    /// The cursor, in characters from the start.
    pub fn cursor(&self) -> usize {
        self.cursor
    }

    /// Whether the line is still Lazaret's suggestion, untouched.
    pub fn is_suggestion(&self) -> bool {
        self.suggested
    }

    /// Inserts `text` at the cursor, made visible: a line holds no control
    /// characters, so what the human submits is what they see.
    pub fn insert(&mut self, text: &str) {
        self.replace_suggestion();
        for c in make_visible(text).0.chars() {
            self.text.insert(self.cursor, c);
            self.cursor += 1;
        }
    }

    fn replace_suggestion(&mut self) {
        if std::mem::take(&mut self.suggested) {
            *self = LineEdit::default();
        }
    }

    /// Where the word before the cursor starts (words are runs of
    /// characters other than spaces and `/`, as in a shell's C-w / M-b).
    fn word_start(&self) -> usize {
        let is_gap = |c: &char| c.is_whitespace() || *c == '/';
        let mut i = self.cursor;
        while i > 0 && is_gap(&self.text[i - 1]) {
            i -= 1;
        }
        while i > 0 && !is_gap(&self.text[i - 1]) {
            i -= 1;
        }
        i
    }

    fn word_end(&self) -> usize {
        let is_gap = |c: &char| c.is_whitespace() || *c == '/';
        let mut i = self.cursor;
        while i < self.text.len() && is_gap(&self.text[i]) {
            i += 1;
        }
        while i < self.text.len() && !is_gap(&self.text[i]) {
            i += 1;
        }
        i
    }

    /// One key; `Some` when it ended the edit.
    pub fn key(&mut self, key: PromptKey) -> Option<EditEnd> {
        match key {
            PromptKey::Enter => return Some(EditEnd::Submit(self.text())),
            PromptKey::Cancel => return Some(EditEnd::Cancel),
            PromptKey::Char(c) if !c.is_control() => {
                self.replace_suggestion();
                self.text.insert(self.cursor, c);
                self.cursor += 1;
            }
            PromptKey::Backspace if self.cursor > 0 => {
                self.suggested = false;
                self.cursor -= 1;
                self.text.remove(self.cursor);
            }
            PromptKey::Delete if self.cursor < self.text.len() => {
                self.suggested = false;
                self.text.remove(self.cursor);
            }
            PromptKey::Left => self.cursor = self.cursor.saturating_sub(1),
            PromptKey::Right => self.cursor = (self.cursor + 1).min(self.text.len()),
            PromptKey::Home => self.cursor = 0,
            PromptKey::End => self.cursor = self.text.len(),
            PromptKey::WordLeft => self.cursor = self.word_start(),
            PromptKey::WordRight => self.cursor = self.word_end(),
            PromptKey::Kill => {
                self.text.drain(..self.cursor);
                self.cursor = 0;
            }
            PromptKey::KillWord => {
                let start = self.word_start();
                self.text.drain(start..self.cursor);
                self.cursor = start;
            }
            _ => return None,
        }
        // Any key that reached here edits or moves: the suggestion is now
        // the human's line.
        self.suggested = false;
        None
    }
}

/// A request in front of the human, and how far they got with it.
#[derive(Debug, Clone)]
pub struct Approval {
    prompt: Prompt,
    /// The letters that approve, fresh for each request.
    code: String,
    mode: Mode,
    /// The command the human edited, shown and run instead of the agent's.
    edited: Option<String>,
    /// When the human turned to the request; `None` while it only waits.
    opened: Option<Instant>,
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
    /// `l`: the review of the agent's changes is shown with the request.
    review_shown: bool,
}

impl Approval {
    /// A request that waits, closed, approved by typing `code`.
    pub fn new(prompt: Prompt, code: String) -> Self {
        Approval {
            prompt,
            code,
            mode: Mode::Reading,
            edited: None,
            opened: None,
            typed: 0,
            scroll: 0,
            window: 0,
            seen_end: false,
            ignored: 0,
            note: None,
            review_shown: false,
        }
    }

    /// Whether the human asked to see the review of the agent's changes.
    pub fn review_shown(&self) -> bool {
        self.review_shown
    }

    pub fn prompt(&self) -> &Prompt {
        &self.prompt
    }

    /// The request's id changed (the first of several identical requests
    /// was withdrawn and a copy takes its place): nothing else does.
    pub fn set_request_id(&mut self, id: String) {
        self.prompt.request_id = id;
    }

    /// The letters that approve.
    pub fn code(&self) -> &str {
        &self.code
    }

    pub fn mode(&self) -> &Mode {
        &self.mode
    }

    /// The human turned to the request (a deliberate act, never a key of
    /// ordinary typing): from [`ARMING`] after `now` its keys count.
    pub fn open(&mut self, now: Instant) {
        if self.opened.is_none() {
            self.opened = Some(now);
            self.typed = 0;
        }
    }

    /// The request goes back to waiting (Esc, another tab focused): its
    /// keys go to the pane again, and what was typed of the code or a
    /// line is forgotten.
    pub fn close(&mut self) {
        self.opened = None;
        self.typed = 0;
        self.mode = Mode::Reading;
    }

    pub fn is_open(&self) -> bool {
        self.opened.is_some()
    }

    /// Until when an open request's keys are held.
    pub fn held_until(&self) -> Option<Instant> {
        self.opened.map(|t| t + ARMING)
    }

    /// Whether keys pressed at `now` are held.
    pub fn held(&self, now: Instant) -> bool {
        self.held_until().is_some_and(|t| now < t)
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

    /// Why the last key did nothing, or what it means; on screen at once.
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

    /// Pasted text: into the line being edited; nothing while reading
    /// (and never while closed: the surface gives it to the pane).
    pub fn paste(&mut self, text: &str) {
        if let Mode::Editing(line) | Mode::Reason(line) = &mut self.mode {
            let first = text.split(['\r', '\n']).next().unwrap_or_default();
            line.insert(first);
        } else if self.is_open() {
            self.note = Some("a paste answers nothing: type the code letter by letter".into());
        }
    }

    /// The human pressed `key` at `now`.
    pub fn key(&mut self, key: PromptKey, now: Instant) -> Step {
        if !self.is_open() {
            return Step::Passed;
        }
        if self.held(now) {
            self.typed = 0;
            self.note =
                Some("that key was dropped: keys count a moment after the request opens".into());
            return Step::Asking;
        }
        // A note answers the key before: the next one takes it away.
        self.note = None;
        match std::mem::replace(&mut self.mode, Mode::Reading) {
            Mode::Reading => self.reading(key),
            Mode::ConfirmAbort => {
                if key == PromptKey::Char('y') || key == PromptKey::Char('Y') {
                    Step::Decided(Verdict::Abort)
                } else {
                    self.note = Some("not aborted: the request still waits for you".into());
                    Step::Asking
                }
            }
            Mode::Editing(mut line) => match line.key(key) {
                None => {
                    self.mode = Mode::Editing(line);
                    Step::Asking
                }
                Some(EditEnd::Cancel) => {
                    self.note = Some("edit dropped: the command is as it was".into());
                    Step::Asking
                }
                Some(EditEnd::Submit(text)) => self.submit_edit(text, line),
            },
            Mode::Reason(mut line) => match line.key(key) {
                None => {
                    self.mode = Mode::Reason(line);
                    Step::Asking
                }
                Some(EditEnd::Cancel) => {
                    self.note = Some("not denied: the request still waits for you".into());
                    Step::Asking
                }
                Some(EditEnd::Submit(text)) => Step::Decided(Verdict::Deny {
                    reason: (!text.trim().is_empty()).then_some(text),
                }),
            },
        }
    }

    fn reading(&mut self, key: PromptKey) -> Step {
        let page = self.window.max(1);
        match key {
            PromptKey::Cancel => {
                self.close();
                return Step::Closed;
            }
            PromptKey::Up => self.scroll = self.scroll.saturating_sub(1),
            PromptKey::Down => self.scroll = self.scroll.saturating_add(1),
            PromptKey::PageUp => self.scroll = self.scroll.saturating_sub(page),
            PromptKey::PageDown | PromptKey::Char(' ') => {
                self.scroll = self.scroll.saturating_add(page);
            }
            PromptKey::Burst => {
                self.typed = 0;
                self.ignored += 1;
                self.note = Some(
                    "ignored: several keys at once (a paste or a terminal's reply) answer nothing"
                        .into(),
                );
            }
            PromptKey::Char(c) => return self.letter(c.to_ascii_lowercase()),
            PromptKey::Enter => {
                self.typed = 0;
                self.note = Some(format!(
                    "Enter answers nothing here: type {} to approve",
                    self.code
                ));
            }
            _ => {
                self.typed = 0;
                self.note = Some(self.keys_hint());
            }
        }
        Step::Asking
    }

    fn keys_hint(&self) -> String {
        format!(
            "keys: type {} to approve · d deny · e edit · q abort · Esc back (it waits)",
            self.code
        )
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
            'q' => {
                self.mode = Mode::ConfirmAbort;
                Step::Asking
            }
            'e' if self.gate() => {
                // The line starts from what the human saw: hidden characters
                // come back as their visible placeholders.
                self.mode = Mode::Editing(LineEdit::new(&make_visible(self.command()).0));
                Step::Asking
            }
            'e' => Step::Asking,
            // `l` is in no code: the review of the agent's changes, one key
            // away when the command runs the agent's files (issue 39).
            'l' if !self.prompt.review.is_empty() => {
                self.review_shown = !self.review_shown;
                Step::Asking
            }
            'l' => {
                self.note =
                    Some("no review to show: the command runs none of the agent's files".into());
                Step::Asking
            }
            'a' => {
                if self.gate() {
                    self.note = Some(format!("to approve, type the code {}", self.code));
                }
                Step::Asking
            }
            c => self.code_letter(c),
        }
    }

    fn code_letter(&mut self, c: char) -> Step {
        if !self.gate() {
            self.typed = 0;
            return Step::Asking;
        }
        let (next, len) = (self.code.chars().nth(self.typed), self.code.chars().count());
        if next != Some(c) {
            self.typed = 0;
            self.note = Some(if self.code.contains(c) {
                format!("wrong code (out of order): start again, type {}", self.code)
            } else {
                format!("'{c}' is not in the code: type {} to approve", self.code)
            });
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
            self.note = Some(
                "read the whole request first: ↓, PgDn or Space to its end (then the code counts)"
                    .into(),
            );
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

    /// An edit was submitted. Unchanged: back to reading. Changed: the
    /// edited command must be read to its end again and the code typed,
    /// on every surface: Enter alone approves nothing.
    fn submit_edit(&mut self, text: String, line: LineEdit) -> Step {
        if text.trim().is_empty() {
            self.mode = Mode::Editing(line);
            self.note = Some("an empty command runs nothing: Esc to go back".into());
            return Step::Asking;
        }
        if text == make_visible(self.command()).0 {
            self.note = Some("unchanged".into());
            return Step::Asking;
        }
        self.edited = Some(text);
        self.scroll = 0;
        self.seen_end = false;
        self.typed = 0;
        self.note = Some(format!(
            "the edited command runs once you read it to its end and type {}",
            self.code
        ));
        Step::Asking
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
            reads: Vec::new(),
            review: Vec::new(),
        }
    }

    /// A request the human opened a while ago and read whole.
    fn opened(command: &str) -> (Approval, Instant) {
        let mut a = Approval::new(prompt(command), "bcf".into());
        let t0 = Instant::now();
        a.open(t0);
        a.showed(0, 10, 10);
        (a, t0 + ARMING)
    }

    fn keys(a: &mut Approval, keys: &str, now: Instant) -> Step {
        let mut last = Step::Asking;
        for c in keys.chars() {
            last = a.key(PromptKey::Char(c), now);
        }
        last
    }

    #[test]
    fn a_closed_request_passes_every_key_to_the_pane() {
        let mut a = Approval::new(prompt("rm -rf ~/.ssh"), "bcf".into());
        a.showed(0, 10, 10);
        let now = Instant::now() + Duration::from_secs(60);
        for k in [
            PromptKey::Char('a'),
            PromptKey::Char('q'),
            PromptKey::Char('d'),
            PromptKey::Char('e'),
            PromptKey::Enter,
            PromptKey::Cancel,
        ] {
            assert_eq!(a.key(k, now), Step::Passed);
        }
        assert_eq!(keys(&mut a, "bcf", now), Step::Passed);
        assert_eq!(a.mode(), &Mode::Reading);
        assert!(a.note().is_none());
    }

    #[test]
    fn held_keys_answer_nothing_and_say_so() {
        let mut a = Approval::new(prompt("ls"), "bcf".into());
        a.showed(0, 10, 10);
        let t0 = Instant::now();
        a.open(t0);
        assert_eq!(keys(&mut a, "qbcf", t0), Step::Asking);
        assert_eq!(a.mode(), &Mode::Reading);
        assert!(a.note().unwrap().contains("dropped"));
        assert_eq!(
            keys(&mut a, "bcf", t0 + ARMING),
            Step::Decided(Verdict::Approve)
        );
    }

    #[test]
    fn a_alone_approves_nothing_and_the_code_does() {
        let (mut a, now) = opened("ls");
        assert_eq!(a.key(PromptKey::Char('A'), now), Step::Asking);
        assert!(a.note().unwrap().contains("type the code bcf"));
        assert_eq!(a.key(PromptKey::Enter, now), Step::Asking);
        assert!(a.note().unwrap().contains("bcf"));
        assert_eq!(keys(&mut a, "BCF", now), Step::Decided(Verdict::Approve));
    }

    #[test]
    fn a_wrong_letter_or_a_burst_restarts_the_code_and_says_so() {
        let (mut a, now) = opened("ls");
        keys(&mut a, "bc", now);
        a.key(PromptKey::Burst, now);
        assert!(a.note().unwrap().contains("several keys"));
        assert_eq!(a.key(PromptKey::Char('f'), now), Step::Asking);
        assert!(a.note().unwrap().contains("out of order"));
        keys(&mut a, "bx", now);
        assert!(a.note().unwrap().contains("'x' is not in the code"));
        assert_eq!(a.typed(), 0);
        assert_eq!(keys(&mut a, "bcf", now), Step::Decided(Verdict::Approve));
        assert_eq!(a.ignored(), 1);
    }

    #[test]
    fn nothing_approves_or_edits_before_the_end_was_seen() {
        let mut a = Approval::new(prompt(&"x".repeat(5000)), "bcf".into());
        let t0 = Instant::now();
        a.open(t0);
        let now = t0 + ARMING;
        a.showed(0, 10, 80);
        assert_eq!(keys(&mut a, "bcfe", now), Step::Asking);
        assert_eq!(a.mode(), &Mode::Reading);
        assert!(a.note().unwrap().contains("whole request"));
        // Deny and abort need no reading.
        a.key(PromptKey::Char('d'), now);
        assert!(matches!(a.mode(), Mode::Reason(_)));
        a.key(PromptKey::Cancel, now);
        assert_eq!(a.mode(), &Mode::Reading);
        while !a.seen_whole_request() {
            a.key(PromptKey::PageDown, now);
            let first = a.scroll().min(70);
            a.showed(first, 10, 80);
        }
        assert_eq!(keys(&mut a, "bcf", now), Step::Decided(Verdict::Approve));
    }

    #[test]
    fn an_edit_is_read_again_and_approved_by_the_code() {
        let (mut a, now) = opened("ls\u{1b}[2J");
        a.key(PromptKey::Char('e'), now);
        let Mode::Editing(line) = a.mode() else {
            panic!("not editing")
        };
        // The line holds what the human saw, hidden characters visible.
        assert_eq!(line.text(), "ls␛[2J");
        for _ in 0..4 {
            a.key(PromptKey::Backspace, now);
        }
        keys(&mut a, " -la", now);
        assert_eq!(a.edited(), None, "an edit not yet submitted");
        // Enter alone approves nothing: the edit is read and the code typed.
        assert_eq!(a.key(PromptKey::Enter, now), Step::Asking);
        assert_eq!(a.command(), "ls -la");
        // The modal marks the command as the human's edit from this.
        assert_eq!(a.edited(), Some("ls -la"));
        assert!(!a.seen_whole_request());
        assert_eq!(keys(&mut a, "bcf", now), Step::Asking);
        a.showed(0, 10, 10);
        let edit = Verdict::Edit {
            command: "ls -la".into(),
        };
        assert_eq!(keys(&mut a, "bcf", now), Step::Decided(edit));
    }

    /// Mutation check (issue 41, scripts/mutants approval): the keys that
    /// read a request move it and say what they do; a letter inside a
    /// code is only ever the code's next one (a `d` there denies nothing);
    /// `l` shows the review only when there is one; a layout that showed
    /// no row has not shown the end.
    #[test]
    fn reading_keys_move_the_request_and_letters_in_a_code_stay_in_it() {
        let (mut a, now) = opened("date");
        a.showed(0, 3, 10);
        a.key(PromptKey::Down, now);
        assert_eq!(a.scroll(), 1);
        a.key(PromptKey::Up, now);
        assert_eq!(a.scroll(), 0);
        a.key(PromptKey::PageDown, now);
        assert_eq!(a.scroll(), 3);
        a.key(PromptKey::Down, now);
        a.key(PromptKey::PageUp, now);
        assert_eq!(a.scroll(), 1);
        assert_eq!(a.key(PromptKey::Enter, now), Step::Asking);
        assert!(
            a.note()
                .is_some_and(|n| n.contains("Enter answers nothing")),
            "{:?}",
            a.note()
        );

        let (mut a, now) = opened("date");
        assert_eq!(a.key(PromptKey::Char('b'), now), Step::Asking);
        assert_eq!(a.key(PromptKey::Char('d'), now), Step::Asking);
        assert_eq!(
            a.mode(),
            &Mode::Reading,
            "a d inside the code opened the denial"
        );
        assert!(
            a.note().is_some_and(|n| n.contains("not in the code")),
            "{:?}",
            a.note()
        );

        let (mut a, now) = opened("make");
        assert_eq!(a.key(PromptKey::Char('l'), now), Step::Asking);
        assert!(!a.review_shown());
        assert!(
            a.note().is_some_and(|n| n.contains("no review")),
            "{:?}",
            a.note()
        );
        let mut p = prompt("make");
        p.review = vec!["! Makefile: executed by host tools".into()];
        let mut a = Approval::new(p, "bcf".into());
        a.open(now - ARMING);
        a.showed(0, 10, 10);
        a.key(PromptKey::Char('l'), now);
        assert!(a.review_shown());
        a.key(PromptKey::Char('l'), now);
        assert!(!a.review_shown());

        let mut a = Approval::new(prompt("date"), "bcf".into());
        a.open(now - ARMING);
        a.showed(1, 0, 1);
        assert!(!a.seen_whole_request(), "no row shown, yet seen whole");
    }

    #[test]
    fn a_denial_carries_its_reason_and_cancel_goes_back() {
        let (mut a, now) = opened("ls");
        a.key(PromptKey::Char('d'), now);
        keys(&mut a, "no", now);
        a.key(PromptKey::Cancel, now);
        assert_eq!(a.mode(), &Mode::Reading);
        assert!(a.note().unwrap().contains("not denied"));
        a.key(PromptKey::Char('D'), now);
        a.paste("not\nthat");
        keys(&mut a, " now", now);
        assert_eq!(
            a.key(PromptKey::Enter, now),
            Step::Decided(Verdict::Deny {
                reason: Some("not now".into())
            })
        );
    }

    #[test]
    fn abort_asks_once_more() {
        let (mut a, now) = opened("ls");
        a.key(PromptKey::Char('q'), now);
        assert_eq!(a.mode(), &Mode::ConfirmAbort);
        assert_eq!(a.key(PromptKey::Char('n'), now), Step::Asking);
        assert!(a.note().unwrap().contains("not aborted"));
        a.key(PromptKey::Char('q'), now);
        assert_eq!(
            a.key(PromptKey::Char('y'), now),
            Step::Decided(Verdict::Abort)
        );
    }

    #[test]
    fn cancel_closes_the_request_which_still_waits() {
        let (mut a, now) = opened("ls");
        keys(&mut a, "bc", now);
        assert_eq!(a.key(PromptKey::Cancel, now), Step::Closed);
        assert!(!a.is_open());
        assert_eq!(a.key(PromptKey::Char('f'), now), Step::Passed);
        a.open(now);
        // Opened again: held again, and the code starts over.
        assert_eq!(a.typed(), 0);
        assert_eq!(
            keys(&mut a, "bcf", now + ARMING),
            Step::Decided(Verdict::Approve)
        );
    }

    #[test]
    fn the_line_editor_has_a_terminals_keys() {
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
        let mut line = LineEdit::new("rm -rf /home/me/.ssh");
        line.key(PromptKey::KillWord);
        assert_eq!(line.text(), "rm -rf /home/me/");
        line.key(PromptKey::WordLeft);
        assert_eq!(line.cursor(), "rm -rf /home/".len());
        line.key(PromptKey::WordLeft);
        line.key(PromptKey::WordRight);
        assert_eq!(line.cursor(), "rm -rf /home".len());
        line.key(PromptKey::Kill);
        assert_eq!((line.text().as_str(), line.cursor()), ("/me/", 0));
        // A suggestion is replaced by typing, cleared by C-u, kept by a move.
        let mut s = LineEdit::suggested("~/src/app");
        s.key(PromptKey::Char('/'));
        assert_eq!(s.text(), "/");
        let mut s = LineEdit::suggested("~/src/app");
        s.key(PromptKey::Kill);
        assert_eq!(s.text(), "");
        let mut s = LineEdit::suggested("~/src/app");
        s.key(PromptKey::Left);
        s.key(PromptKey::Char('p'));
        assert_eq!(s.text(), "~/src/appp");
    }

    mod prose {
        use super::*;
        use proptest::prelude::*;

        /// What a human typing to an agent sends: letters of every case,
        /// digits, spaces, punctuation, Enter, Backspace; with the pauses
        /// people make between keys and between sentences.
        fn typed() -> impl Strategy<Value = Vec<(PromptKey, u64)>> {
            let key = prop_oneof![
                8 => proptest::char::range('a', 'z').prop_map(PromptKey::Char),
                2 => proptest::char::range('A', 'Z').prop_map(PromptKey::Char),
                3 => Just(PromptKey::Char(' ')),
                1 => proptest::sample::select(vec!['.', ',', '!', '?', '\'', '-', ':', '/', '~', '0', '7'])
                    .prop_map(PromptKey::Char),
                1 => Just(PromptKey::Enter),
                1 => Just(PromptKey::Backspace),
            ];
            let pause = prop_oneof![8 => 30u64..400, 2 => 1_000u64..3_000];
            proptest::collection::vec((key, pause), 0..400)
        }

        proptest! {
            /// Decisions.md D15: whatever a human types, and whenever the
            /// request arrives in it, ordinary typing never decides it and
            /// every key still reaches the pane.
            #[test]
            fn typing_never_decides_a_request_and_every_key_reaches_the_pane(
                keys in typed(),
                arrives in 0usize..400,
                code in "[bcfghjkmnprstuvwxyz]{3}",
            ) {
                let mut a = Approval::new(prompt("rm -rf ~/.ssh"), code);
                a.showed(0, 10, 10);
                let mut now = Instant::now();
                let mut passed = 0;
                for (i, (key, pause)) in keys.iter().enumerate() {
                    now += Duration::from_millis(*pause);
                    if i == arrives {
                        // A second copy of the request arriving changes nothing.
                        a.set_request_id("r-2".into());
                    }
                    match a.key(*key, now) {
                        Step::Passed => passed += 1,
                        other => prop_assert!(false, "key {i} ({key:?}) gave {other:?}"),
                    }
                }
                prop_assert_eq!(passed, keys.len());
                prop_assert!(!a.is_open());
            }
        }
    }
}
