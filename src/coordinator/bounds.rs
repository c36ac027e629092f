//! What the agent can make the coordinator hold (issue 26): its file
//! descriptors. The coordinator raises its own descriptor limit to the
//! hard limit at start, keeps [`SUPERVISION_RESERVE`] of them for
//! supervision (control connections aside: the watchdog's reads, podman
//! calls, the store, the log) and bounds the connections of each listener
//! with a [`Gate`]. A connection over its listener's bound is closed at
//! once and counted; the count is reported at most once per
//! [`REPORT_INTERVAL`]. Under runsc every peer inside one sandbox is the
//! gofer (SO_PEERCRED cannot tell them apart), so the bound is per
//! listener, that is per domain.
//!
//! And its memory for screens (issue 40): every size a hosted session's
//! screen takes, whoever announced it (a client starting or resizing it,
//! or the Session Host, which is the agent's, announcing one it "still
//! runs"), is clamped by [`clamp_size`] and charged to the domain's
//! [`ScreenBudget`], screens and scrollback together.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Descriptors kept for supervision whatever the listeners hold.
pub const SUPERVISION_RESERVE: u64 = 256;
/// Escalation connections served at once (the agent's requests; a few
/// wait for a human, the rest are answered in milliseconds).
pub const ESCALATION_CONNECTIONS: usize = 64;
/// Descriptors one escalation connection may cost: its socket, its pinned
/// working folder and an approved command's pipes.
pub const ESCALATION_DESCRIPTORS_EACH: u64 = 8;
/// Control connections served at once (the user's sessions and commands).
pub const CONTROL_CONNECTIONS: usize = 256;
/// Descriptors opened at start and closed when supervision is lost, so
/// that stopping the sandbox has some even when none are left.
pub const EMERGENCY_DESCRIPTORS: usize = 32;
/// Refusals are reported (log, audit, attached humans) at most this often.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(30);

/// The descriptor limit as the coordinator found and left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptors {
    /// The soft limit found at start.
    pub was: u64,
    /// The soft limit now (the hard limit, if raising it worked).
    pub soft: u64,
    pub hard: u64,
}

/// Raises this process's soft RLIMIT_NOFILE to its hard limit.
pub fn raise_descriptor_limit() -> Result<Descriptors, String> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (was, hard) = getrlimit(Resource::RLIMIT_NOFILE)
        .map_err(|e| format!("cannot read the descriptor limit: {e}"))?;
    if was >= hard {
        return Ok(Descriptors {
            was,
            soft: was,
            hard,
        });
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
        .map_err(|e| format!("cannot raise the descriptor limit from {was} to {hard}: {e}"))?;
    Ok(Descriptors {
        was,
        soft: hard,
        hard,
    })
}

/// How many connections each listener may hold under a descriptor limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub escalation: usize,
    pub control: usize,
    /// Left for supervision (at least [`SUPERVISION_RESERVE`] when the
    /// limit allows it).
    pub reserve: u64,
}

impl Budget {
    /// The bounds for a soft limit of `limit` descriptors: at most half of
    /// what supervision leaves goes to escalation connections, the rest to
    /// control connections; each listener gets at least one.
    pub fn for_limit(limit: u64) -> Budget {
        let available = limit.saturating_sub(SUPERVISION_RESERVE);
        let escalation = usize::try_from(available / 2 / ESCALATION_DESCRIPTORS_EACH)
            .unwrap_or(usize::MAX)
            .clamp(1, ESCALATION_CONNECTIONS);
        let left = available.saturating_sub(escalation as u64 * ESCALATION_DESCRIPTORS_EACH);
        let control = usize::try_from(left)
            .unwrap_or(usize::MAX)
            .clamp(1, CONTROL_CONNECTIONS);
        Budget {
            escalation,
            control,
            reserve: limit
                .saturating_sub(escalation as u64 * ESCALATION_DESCRIPTORS_EACH)
                .saturating_sub(control as u64),
        }
    }
}

/// Connections refused since the last report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub listener: &'static str,
    pub bound: usize,
    /// Refused since the previous report.
    pub count: u64,
    /// Refused since the listener opened.
    pub total: u64,
}

impl Refused {
    pub fn message(&self) -> String {
        format!(
            "the {} refused {} connection(s) ({} in all): it serves at most {} at once, and the ones over it are closed at once",
            self.listener, self.count, self.total, self.bound
        )
    }

    /// The audit record's data.
    pub fn record(&self) -> serde_json::Value {
        serde_json::json!({
            "listener": self.listener,
            "bound": self.bound,
            "refused": self.count,
            "refused_total": self.total,
            "message": self.message(),
        })
    }
}

/// The bound on one listener's connections.
#[derive(Debug)]
pub struct Gate {
    pub listener: &'static str,
    pub bound: usize,
    permits: Arc<Semaphore>,
    total: AtomicU64,
    /// When the last report went out, and what was refused since.
    reports: Mutex<(Option<Instant>, u64)>,
}

impl Gate {
    pub fn new(listener: &'static str, bound: usize) -> Arc<Gate> {
        Arc::new(Gate {
            listener,
            bound,
            permits: Arc::new(Semaphore::new(bound)),
            total: AtomicU64::new(0),
            reports: Mutex::new((None, 0)),
        })
    }

    /// A slot for one connection, held until the permit drops; `Err` when
    /// the listener is full (then close the connection at once), holding a
    /// report when one is due.
    pub fn admit(&self) -> Result<OwnedSemaphorePermit, Option<Refused>> {
        if let Ok(p) = self.permits.clone().try_acquire_owned() {
            return Ok(p);
        }
        self.total.fetch_add(1, Ordering::Relaxed);
        let mut r = self.reports.lock().unwrap_or_else(|e| e.into_inner());
        r.1 += 1;
        Err(self.due(&mut r))
    }

    /// The refusals not yet reported, once [`REPORT_INTERVAL`] has passed
    /// since the last report (for a periodic flush).
    pub fn pending_report(&self) -> Option<Refused> {
        let mut r = self.reports.lock().unwrap_or_else(|e| e.into_inner());
        self.due(&mut r)
    }

    /// The refusals not yet reported, at once (the listener is closing).
    pub fn last_report(&self) -> Option<Refused> {
        let mut r = self.reports.lock().unwrap_or_else(|e| e.into_inner());
        r.0 = None;
        self.due(&mut r)
    }

    fn due(&self, r: &mut (Option<Instant>, u64)) -> Option<Refused> {
        if r.1 == 0 || r.0.is_some_and(|t| t.elapsed() < REPORT_INTERVAL) {
            return None;
        }
        let count = std::mem::take(&mut r.1);
        r.0 = Some(Instant::now());
        Some(Refused {
            listener: self.listener,
            bound: self.bound,
            count,
            total: self.total.load(Ordering::Relaxed),
        })
    }

    /// Connections refused since the listener opened.
    pub fn refused(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Connections held now.
    pub fn held(&self) -> usize {
        self.bound - self.permits.available_permits()
    }
}

/// The most rows a screen may have, whoever asks (a wall of 4K monitors
/// at a small font is some 300).
pub const MAX_ROWS: u16 = 500;
/// The most columns.
pub const MAX_COLS: u16 = 1000;
/// Rows of scrollback a session gets when its domain's budget allows.
pub const SCROLLBACK_ROWS: usize = 2_000;
/// Rows of scrollback a session gets at the least: one that would get
/// fewer is refused (or its resize is).
pub const MIN_SCROLLBACK_ROWS: usize = 100;
/// The memory one domain's screens may hold in the coordinator (all its
/// sessions, the ended ones kept for their last screen and the spare).
/// 47 sessions at 80 columns, 19 at 200, fit with their whole scrollback.
pub const SCREEN_BUDGET: u64 = 256 << 20;
/// What one cell costs (the terminal parser's `Cell`).
const CELL_BYTES: u64 = size_of::<vt100::Cell>() as u64;
/// What one row costs besides its cells (its vector and flags, rounded up).
const ROW_BYTES: u64 = 64;

/// `rows` × `cols` within [`MAX_ROWS`] × [`MAX_COLS`] (and at least 1×1):
/// the one place a screen's size is bounded.
pub fn clamp_size(rows: u16, cols: u16) -> (u16, u16) {
    (rows.clamp(1, MAX_ROWS), cols.clamp(1, MAX_COLS))
}

/// What a screen of `rows` × `cols` with `scrollback` rows may cost at
/// most: the main and the alternate screen, and a full scrollback whose
/// every row the agent filled to the width.
pub fn screen_cost(rows: u16, cols: u16, scrollback: usize) -> u64 {
    let lines = 2 * u64::from(rows) + scrollback as u64;
    lines * (u64::from(cols) * CELL_BYTES + ROW_BYTES)
}

/// A screen the budget admitted: its clamped size and its scrollback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sized {
    pub rows: u16,
    pub cols: u16,
    pub scrollback: usize,
}

/// A screen the domain's budget has no room for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a {rows}x{cols} screen does not fit in this domain's screen memory ({used_mib} of {budget_mib} MiB held by {sessions} session(s)): end sessions you no longer need (`lazaret sessions`), or use a smaller window"
)]
pub struct OverBudget {
    pub rows: u16,
    pub cols: u16,
    pub used_mib: u64,
    pub budget_mib: u64,
    pub sessions: usize,
}

/// What each screen of a domain is charged: the largest size it ever had
/// (a parser keeps a row's storage when it narrows) with its scrollback.
#[derive(Debug)]
pub struct ScreenBudget {
    budget: u64,
    charged: std::collections::BTreeMap<u32, Sized>,
}

impl Default for ScreenBudget {
    fn default() -> Self {
        ScreenBudget::new(SCREEN_BUDGET)
    }
}

impl ScreenBudget {
    pub fn new(budget: u64) -> ScreenBudget {
        ScreenBudget {
            budget,
            charged: Default::default(),
        }
    }

    /// Bytes charged now.
    pub fn used(&self) -> u64 {
        self.charged
            .values()
            .map(|s| screen_cost(s.rows, s.cols, s.scrollback))
            .sum()
    }

    fn used_but(&self, id: u32) -> u64 {
        self.charged
            .iter()
            .filter(|(k, _)| **k != id)
            .map(|(_, s)| screen_cost(s.rows, s.cols, s.scrollback))
            .sum()
    }

    fn over(&self, rows: u16, cols: u16) -> OverBudget {
        OverBudget {
            rows,
            cols,
            used_mib: self.used() >> 20,
            budget_mib: self.budget >> 20,
            sessions: self.charged.len(),
        }
    }

    /// A new screen for session `id` (replacing its charge, if any) at the
    /// clamped size, with as much scrollback as fits up to
    /// [`SCROLLBACK_ROWS`]; refused when not even [`MIN_SCROLLBACK_ROWS`]
    /// fit.
    pub fn admit(&mut self, id: u32, rows: u16, cols: u16) -> Result<Sized, OverBudget> {
        let (rows, cols) = clamp_size(rows, cols);
        let left = self.budget.saturating_sub(self.used_but(id));
        let per_line = u64::from(cols) * CELL_BYTES + ROW_BYTES;
        let lines = left / per_line;
        let scrollback = usize::try_from(lines.saturating_sub(2 * u64::from(rows)))
            .unwrap_or(usize::MAX)
            .min(SCROLLBACK_ROWS);
        if scrollback < MIN_SCROLLBACK_ROWS {
            return Err(self.over(rows, cols));
        }
        let sized = Sized {
            rows,
            cols,
            scrollback,
        };
        self.charged.insert(id, sized);
        Ok(sized)
    }

    /// Session `id` resized: its clamped new size, charged at the largest
    /// it has had, or refused when that does not fit (it keeps its size).
    pub fn resize(&mut self, id: u32, rows: u16, cols: u16) -> Result<(u16, u16), OverBudget> {
        let (rows, cols) = clamp_size(rows, cols);
        let Some(was) = self.charged.get(&id).copied() else {
            return Err(self.over(rows, cols));
        };
        let grown = Sized {
            rows: was.rows.max(rows),
            cols: was.cols.max(cols),
            scrollback: was.scrollback,
        };
        let cost = screen_cost(grown.rows, grown.cols, grown.scrollback);
        if self.used_but(id).saturating_add(cost) > self.budget {
            return Err(self.over(rows, cols));
        }
        self.charged.insert(id, grown);
        Ok((rows, cols))
    }

    /// Session `id`'s screen is gone.
    pub fn release(&mut self, id: u32) {
        self.charged.remove(&id);
    }

    pub fn sessions(&self) -> usize {
        self.charged.len()
    }
}

/// A bound on how often something may happen: `burst` at once, then one
/// more each `every`. What is over it is counted, and the count reported
/// at most once per [`REPORT_INTERVAL`].
#[derive(Debug)]
pub struct Rate {
    pub what: &'static str,
    burst: u32,
    every: Duration,
    tokens: u32,
    since: Instant,
    refused: u64,
    total: u64,
    reported: Option<Instant>,
}

impl Rate {
    pub fn new(what: &'static str, burst: u32, every: Duration) -> Rate {
        Rate {
            what,
            burst,
            every,
            tokens: burst,
            since: Instant::now(),
            refused: 0,
            total: 0,
            reported: None,
        }
    }

    fn refill(&mut self) {
        let gained = self.since.elapsed().as_nanos() / self.every.as_nanos().max(1);
        if gained > 0 {
            let gained = u32::try_from(gained).unwrap_or(u32::MAX);
            self.tokens = self.tokens.saturating_add(gained).min(self.burst);
            self.since += self.every * gained.min(self.burst);
            if self.tokens == self.burst {
                self.since = Instant::now();
            }
        }
    }

    /// Whether one more may happen now; a refusal is counted.
    pub fn allow(&mut self) -> bool {
        self.refill();
        if self.tokens > 0 {
            self.tokens -= 1;
            return true;
        }
        self.refused += 1;
        self.total += 1;
        false
    }

    /// What was refused since the last report, once it is due.
    pub fn report(&mut self) -> Option<String> {
        if self.reported.is_some_and(|t| t.elapsed() < REPORT_INTERVAL) {
            return None;
        }
        self.flush()
    }

    /// What was refused since the last report, at once (what it counts
    /// ended: a connection, say).
    pub fn flush(&mut self) -> Option<String> {
        if self.refused == 0 {
            return None;
        }
        self.reported = Some(Instant::now());
        let count = std::mem::take(&mut self.refused);
        Some(format!(
            "{count} {} refused ({} in all): at most {} at once and one more every {} s are taken",
            self.what,
            self.total,
            self.burst,
            self.every.as_secs()
        ))
    }
}

/// This process's resident memory in bytes (what the screen budget is
/// there to bound), from `/proc/self/status`.
pub fn resident_memory() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kb << 10)
}

/// After a failed `accept` (out of descriptors, say) the pending
/// connection stays queued, so accepting again at once would spin.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Descriptors held for the moment supervision is lost: dropping this
/// closes them, so that stopping the sandbox (podman calls, reads of
/// /proc) can open what it needs.
#[derive(Debug, Default)]
pub struct Emergency(Mutex<Vec<std::fs::File>>);

impl Emergency {
    /// Opens [`EMERGENCY_DESCRIPTORS`] descriptors of /dev/null.
    pub fn open() -> Emergency {
        let files = (0..EMERGENCY_DESCRIPTORS)
            .map_while(|_| std::fs::File::open("/dev/null").ok())
            .collect();
        Emergency(Mutex::new(files))
    }

    /// Closes them all; returns how many.
    pub fn release(&self) -> usize {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner())).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_leaves_room_for_supervision() {
        // A common default soft limit: both listeners fit beside the reserve.
        let b = Budget::for_limit(1024);
        assert!(b.escalation >= 16 && b.escalation <= ESCALATION_CONNECTIONS);
        assert!(b.reserve >= SUPERVISION_RESERVE, "{b:?}");
        // A raised limit: the fixed bounds.
        let b = Budget::for_limit(20_000);
        assert_eq!(
            (b.escalation, b.control),
            (ESCALATION_CONNECTIONS, CONTROL_CONNECTIONS)
        );
        // A tiny one still serves one of each.
        let b = Budget::for_limit(64);
        assert_eq!((b.escalation, b.control), (1, 1));
    }

    #[test]
    fn a_full_gate_refuses_and_reports_once_per_interval() {
        let g = Gate::new("test socket", 2);
        let a = g.admit().unwrap();
        let _b = g.admit().unwrap();
        let first = g
            .admit()
            .unwrap_err()
            .expect("the first refusal is reported");
        assert_eq!((first.count, first.total), (1, 1));
        assert!(g.admit().unwrap_err().is_none(), "not again so soon");
        assert!(g.pending_report().is_none());
        assert!(g.admit().unwrap_err().is_none());
        // Closing, what was not reported yet is, at once.
        assert_eq!(g.last_report().map(|r| (r.count, r.total)), Some((2, 3)));
        assert!(g.last_report().is_none());
        assert_eq!(g.refused(), 3);
        assert_eq!(g.held(), 2);
        drop(a);
        assert!(g.admit().is_ok());
    }

    #[test]
    fn every_screen_size_is_clamped_and_charged() {
        assert_eq!(clamp_size(4096, 65535), (MAX_ROWS, MAX_COLS));
        assert_eq!(clamp_size(0, 0), (1, 1));
        let mut b = ScreenBudget::default();
        // The attack of issue 40: two 4096x4096 announcements. Each is
        // clamped, and the second gets what scrollback is left.
        let one = b.admit(1, 4096, 4096).unwrap();
        assert_eq!((one.rows, one.cols, one.scrollback), (500, 1000, 2000));
        assert!(b.used() <= SCREEN_BUDGET);
        // However many follow, the budget holds: the last ones admitted
        // get less scrollback, then they are refused, saying why.
        let mut shortened = false;
        let mut refused = None;
        for id in 2..100 {
            match b.admit(id, u16::MAX, u16::MAX) {
                Ok(s) => shortened |= s.scrollback < SCROLLBACK_ROWS,
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
            assert!(b.used() <= SCREEN_BUDGET);
        }
        assert!(shortened);
        let e = refused.expect("the budget ran out");
        assert!(e.to_string().contains("lazaret sessions"), "{e}");
        assert!(b.used() <= SCREEN_BUDGET);
        // A resize that would not fit is refused; a session that goes
        // makes room.
        let mut b = ScreenBudget::new(screen_cost(24, 80, SCROLLBACK_ROWS) + 1);
        b.admit(1, 24, 80).unwrap();
        assert!(b.resize(1, 24, 81).is_err());
        assert_eq!(b.resize(1, 10, 40), Ok((10, 40)));
        assert_eq!(b.resize(1, 24, 80), Ok((24, 80)));
        assert!(b.admit(2, 24, 80).is_err());
        b.release(1);
        assert!(b.admit(2, 24, 80).is_ok());
        // Typical use keeps its whole scrollback: 40 sessions at 80 columns.
        let mut b = ScreenBudget::default();
        for id in 0..40 {
            assert_eq!(b.admit(id, 50, 80).unwrap().scrollback, SCROLLBACK_ROWS);
        }
    }

    #[test]
    fn a_rate_allows_its_burst_then_counts_and_reports_once() {
        let mut r = Rate::new("announcements", 3, Duration::from_secs(3600));
        assert!((0..3).all(|_| r.allow()));
        assert!(!r.allow() && !r.allow());
        let m = r.report().expect("due");
        assert!(m.starts_with("2 announcements refused (2 in all)"), "{m}");
        assert!(!r.allow());
        assert!(r.report().is_none(), "not again so soon");
        let mut fast = Rate::new("x", 1, Duration::from_millis(10));
        assert!(fast.allow());
        std::thread::sleep(Duration::from_millis(30));
        assert!(fast.allow(), "refilled");
    }

    #[test]
    fn emergency_descriptors_are_released() {
        let e = Emergency::open();
        assert_eq!(e.release(), EMERGENCY_DESCRIPTORS);
        assert_eq!(e.release(), 0);
    }
}
