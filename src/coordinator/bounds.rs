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
    fn emergency_descriptors_are_released() {
        let e = Emergency::open();
        assert_eq!(e.release(), EMERGENCY_DESCRIPTORS);
        assert_eq!(e.release(), 0);
    }
}
