//! The approval inbox (decisions.md D14): the workbench watches every
//! running domain of the user, not only those of its tabs, so that a
//! request waiting anywhere (a detached session, another domain, a plain
//! `lazaret exec`) shows in its queue and can be answered here. The first
//! answer of any of the user's clients wins; the coordinator withdraws the
//! request from the others.
//!
//! Domains are found by their control sockets in the runtime folder (a
//! directory read each second, nothing asked of podman); each is watched
//! on one query connection that never holds the domain up. The same
//! connection brings the domain's status after each change and its live
//! policy changes: the sessions and network panels never poll.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use super::Ev;
use crate::coordinator::protocol::{ClientMsg, CoordMsg, FrameReader, write_frame};
use crate::rundir::RuntimeDir;

/// How often the runtime folder is read for domains that started.
const DISCOVERY: Duration = Duration::from_secs(1);

/// Where a decision for a domain's inbox goes, by domain hash.
#[derive(Debug, Clone, Default)]
pub struct Routes(Arc<Mutex<BTreeMap<String, mpsc::UnboundedSender<ClientMsg>>>>);

impl Routes {
    /// Sends `msg` to the coordinator of domain `hash`; `false` when that
    /// domain is no longer watched (it went down).
    pub fn send(&self, hash: &str, msg: ClientMsg) -> bool {
        self.0
            .lock()
            .expect("lock")
            .get(hash)
            .is_some_and(|tx| tx.send(msg).is_ok())
    }
}

/// Starts watching; news arrives as [`Ev::Inbox`] and [`Ev::InboxGone`].
pub fn start(
    rt: &tokio::runtime::Handle,
    rundir: RuntimeDir,
    tx: std::sync::mpsc::Sender<Ev>,
) -> Routes {
    let routes = Routes::default();
    let r = routes.clone();
    rt.spawn(async move {
        let watched: Arc<Mutex<std::collections::BTreeSet<PathBuf>>> = Arc::default();
        loop {
            for socket in crate::client::session::sockets(&rundir) {
                if !watched.lock().expect("lock").insert(socket.clone()) {
                    continue;
                }
                let (tx, r, watched) = (tx.clone(), r.clone(), watched.clone());
                tokio::spawn(async move {
                    watch(&socket, &tx, &r).await;
                    watched.lock().expect("lock").remove(&socket);
                });
            }
            tokio::time::sleep(DISCOVERY).await;
        }
    });
    routes
}

/// Watches one domain's inbox until its coordinator goes.
async fn watch(socket: &std::path::Path, tx: &std::sync::mpsc::Sender<Ev>, routes: &Routes) {
    let Ok(client) = crate::client::session::query(socket).await else {
        return;
    };
    let domain = client.domain;
    let hash = domain.hash.clone();
    let label = format!("{} · {}", domain.profile, domain.workspace);
    let (r, mut w) = client.stream.into_split();
    if write_frame(&mut w, &ClientMsg::Inbox).await.is_err() {
        return;
    }
    let (decisions, mut decided) = mpsc::unbounded_channel();
    routes
        .0
        .lock()
        .expect("lock")
        .insert(hash.clone(), decisions);
    let mut frames = FrameReader::new(r);
    loop {
        tokio::select! {
            msg = frames.next::<CoordMsg>() => match msg {
                Ok(msg @ (CoordMsg::Pending { .. }
                    | CoordMsg::Withdrawn { .. }
                    | CoordMsg::Outcome { .. }
                    | CoordMsg::Status { .. }
                    | CoordMsg::PolicyChanged { .. })) => {
                    let ev = Ev::Inbox {
                        hash: hash.clone(),
                        label: label.clone(),
                        msg: Box::new(msg),
                    };
                    if tx.send(ev).is_err() {
                        break;
                    }
                }
                Ok(CoordMsg::ShuttingDown { .. }) | Err(_) => break,
                Ok(_) => {}
            },
            Some(msg) = decided.recv() => {
                if write_frame(&mut w, &msg).await.is_err() {
                    break;
                }
            }
        }
    }
    routes.0.lock().expect("lock").remove(&hash);
    let _ = tx.send(Ev::InboxGone(hash));
}
