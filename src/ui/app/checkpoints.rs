//! The checkpoints overlay (prefix `K`): the focused tab's domain's
//! checkpoints, taken, restored and forked from the keyboard. A restore or
//! a fork is the CLI's own (`lazaret restore`, `lazaret fork`), run as a
//! child of this binary on a worker thread: the UI keeps drawing, and
//! there is one implementation of each.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use lazaret_widgets::panels::{CheckpointRow, CheckpointsForm, CheckpointsOutcome};
use lazaret_widgets::visible::visible;

use super::*;
use crate::ui::CheckpointRun;

/// The open overlay: its state, and the tab launch of the domain it shows.
#[derive(Debug)]
pub(super) struct Overlay {
    pub form: CheckpointsForm,
    launch: Launch,
}

/// The domain's checkpoints as the overlay lists them (a few small files
/// read: cheap enough for the UI thread).
fn rows(domain_root: &Path) -> Vec<CheckpointRow> {
    crate::checkpoint::list(domain_root)
        .into_iter()
        .map(|c| CheckpointRow {
            taken: crate::checkpoint::default_name(
                std::time::UNIX_EPOCH + Duration::from_secs(c.created),
            ),
            size: crate::checkpoint::show_bytes(c.bytes),
            name: c.name,
        })
        .collect()
}

impl App {
    /// Prefix K: the overlay over the focused tab's domain.
    pub(super) fn open_checkpoints(&mut self) {
        let Some(tab) = self.tabs.get(self.focus) else {
            return;
        };
        let launch = tab.launch.clone();
        let label = format!("{} {}", launch.profile, launch.ctx.anchor.hash());
        let form = CheckpointsForm::new(&label, rows(&launch.ctx.domain_root));
        self.checkpoints = Some(Overlay { form, launch });
    }

    /// A checkpoint was taken (or refused): an open overlay lists it.
    pub(super) fn checkpoints_changed(&mut self) {
        if let Some(o) = self.checkpoints.as_mut() {
            o.form.set_rows(rows(&o.launch.ctx.domain_root));
        }
    }

    /// A key for the open overlay.
    pub(super) fn checkpoints_key(&mut self, key: KeyEvent) {
        let Some(o) = self.checkpoints.as_mut() else {
            return;
        };
        match o.form.handle_key(key) {
            CheckpointsOutcome::Open => {}
            CheckpointsOutcome::Close => self.checkpoints = None,
            CheckpointsOutcome::Take => {
                // The overlay's domain is the focused tab's (it takes the
                // keys, so the focus has not moved).
                self.take_checkpoint();
            }
            CheckpointsOutcome::Restore { name, force } => {
                if !force {
                    // What the restore would set back in the user's
                    // repository is asked about first, as the CLI does.
                    let mode = self
                        .launcher
                        .config
                        .select_profile(Some(&o.launch.profile))
                        .ok()
                        .and_then(|p| p.workspace_mode);
                    let data_root = &self.launcher.config.data_root;
                    match crate::engine::branch_set_back(
                        data_root,
                        &o.launch.ctx.anchor,
                        mode,
                        &name,
                    ) {
                        Ok(None) => {}
                        Ok(Some((branch, n))) => {
                            o.form.ask_force(format!(
                                "Branch {branch} in your repository goes back by {n} commit(s) the agent made since (its reflog keeps them)."
                            ));
                            return;
                        }
                        Err(e) => {
                            o.form
                                .set_error(format!("cannot restore {}: {e}", visible(&name)));
                            return;
                        }
                    }
                }
                if let Some(o) = self.checkpoints.take() {
                    self.restore(&o.launch, &name, force);
                }
            }
            CheckpointsOutcome::Fork { name, new } => {
                if let Err(e) = crate::domain::validate_fork_name(&new) {
                    o.form.set_error(e);
                    return;
                }
                if let Some(o) = self.checkpoints.take() {
                    self.fork(&o.launch, &name, &new);
                }
            }
        }
    }

    /// Brings the domain of `launch` back as checkpoint `name`. Its tabs
    /// let go of their sessions first, as detaching does: the restore
    /// ends those sessions, and the tabs must neither end them themselves
    /// nor report the domain going down as a failure. Afterwards the
    /// domain's sessions, as the checkpoint had them, get tabs again.
    fn restore(&mut self, launch: &Launch, name: &str, force: bool) {
        if self.refuse_while_running() {
            return;
        }
        let hash = launch.ctx.anchor.hash().to_string();
        let mut i = 0;
        while i < self.tabs.len() {
            if self.tabs[i].launch.ctx.anchor.hash() != hash {
                i += 1;
                continue;
            }
            let mut tab = self.tabs.remove(i);
            let gone: Vec<String> = tab
                .prompts
                .iter()
                .flat_map(|p| p.ids().cloned().collect::<Vec<_>>())
                .collect();
            for id in gone {
                self.set_status(
                    &hash,
                    &id,
                    EscalationStatus::Denied {
                        reason: Some("its domain was restored".into()),
                    },
                );
            }
            tab.close();
        }
        self.focus = self.focus.min(self.tabs.len().saturating_sub(1));
        self.panel_focus = None;
        let workspace = launch.ctx.anchor.workspace().to_path_buf();
        self.message = Some(format!(
            "restoring {} to checkpoint {}: its sessions end and come back as they were then…",
            launch.profile,
            visible(name)
        ));
        let args = ["restore", launch.profile.as_str(), name, "-w"]
            .into_iter()
            .map(OsString::from)
            .chain([workspace.clone().into_os_string()])
            .chain(force.then(|| OsString::from("--force")))
            .collect();
        self.run_cli(
            args,
            launch.profile.clone(),
            workspace,
            launch.ctx.control_socket.clone(),
            false,
        );
    }

    /// Forks checkpoint `name` of the domain of `launch` as `PROFILE@NEW`,
    /// then opens a tab on the fork's (first) session. The original runs
    /// on, its tabs untouched.
    fn fork(&mut self, launch: &Launch, name: &str, new: &str) {
        if self.refuse_while_running() {
            return;
        }
        // A fork of a fork is a fork of the profile: `PROFILE@NEW`.
        let base = crate::domain::split_name(&launch.profile).0;
        let forked = format!("{base}@{new}");
        let workspace = launch.ctx.anchor.workspace().to_path_buf();
        let socket = match self.launcher.context(Some(&forked), &workspace) {
            Ok(ctx) => ctx.control_socket,
            Err(e) => {
                self.message = Some(format!("cannot fork as {forked}: {e:#}"));
                return;
            }
        };
        self.message = Some(format!(
            "forking checkpoint {} of {} as {forked}…",
            visible(name),
            launch.profile
        ));
        let args = ["fork", launch.profile.as_str(), name, "--as", new, "-w"]
            .into_iter()
            .map(OsString::from)
            .chain([workspace.clone().into_os_string()])
            .collect();
        self.run_cli(args, forked, workspace, socket, true);
    }

    /// One restore or fork at a time: each takes domains down or up.
    fn refuse_while_running(&mut self) -> bool {
        if self.cli_running {
            self.message = Some("a restore or fork is still running; wait for it".into());
        }
        self.cli_running
    }

    /// Runs this binary with `args` (and this workbench's `--config`) on a
    /// worker thread, its output captured; then asks which of the
    /// sessions of the domain at `socket` run, and reports both.
    fn run_cli(
        &mut self,
        args: Vec<OsString>,
        profile: String,
        workspace: PathBuf,
        socket: PathBuf,
        first_only: bool,
    ) {
        self.cli_running = true;
        let config = self.launcher.explicit.clone();
        let tx = self.tx.clone();
        let rt = self.rt.clone();
        self.rt.spawn_blocking(move || {
            let said = std::env::current_exe()
                .map_err(|e| format!("cannot find this program: {e}"))
                .and_then(|exe| {
                    let mut cmd = std::process::Command::new(exe);
                    if let Some(c) = &config {
                        cmd.arg("--config").arg(c);
                    }
                    cmd.args(&args)
                        .stdin(std::process::Stdio::null())
                        .output()
                        .map_err(|e| format!("cannot run lazaret {:?}: {e}", args.first()))
                })
                .and_then(|out| {
                    let (stdout, stderr) = (
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr),
                    );
                    outcome(out.status.success(), &stdout, &stderr, out.status.code())
                });
            // Whatever happened, the sessions that run now get tabs (a
            // restore refused before it took the domain down leaves them).
            let sessions = rt.block_on(crate::ui::live_sessions(&socket));
            let run = CheckpointRun {
                said,
                profile,
                workspace,
                sessions,
                first_only,
            };
            let _ = tx.send(Ev::CheckpointRan(Box::new(run)));
        });
    }

    /// A restore or a fork ended: its word on the status line, and tabs
    /// on the sessions that came back.
    pub(super) fn checkpoint_ran(&mut self, run: CheckpointRun) {
        self.cli_running = false;
        let ok = run.said.is_ok();
        self.message = Some(match run.said {
            Ok(said) => said,
            Err(why) => why,
        });
        let mut sessions: Vec<Option<u32>> = run.sessions.into_iter().map(Some).collect();
        if run.first_only {
            sessions.truncate(1);
        }
        // Up with no session left (a domain restored from a checkpoint
        // without one): a new session in it.
        if ok && sessions.is_empty() {
            sessions.push(None);
        }
        for n in sessions {
            match self.launcher.launch(Some(&run.profile), &run.workspace) {
                Ok(mut launch) => {
                    if let Some(n) = n {
                        launch.session = crate::client::SessionChoice::Attach(n);
                    }
                    self.open_tab(&launch);
                }
                Err(e) => {
                    self.message = Some(format!("cannot open {}: {e:#}", run.profile));
                    break;
                }
            }
        }
        // With no tab left (a restore that failed after taking the domain
        // down) the workbench stays, saying why; prefix c opens a tab.
        self.dirty = true;
    }
}

/// The child's last word, made visible: on success its report (the last
/// line it printed); on failure its error (`lazaret: ...`), not the boot
/// steps it printed before (`lazaret: [ 1.2s] ...`).
fn outcome(ok: bool, stdout: &str, stderr: &str, code: Option<i32>) -> Result<String, String> {
    let last = |text: &str| {
        text.lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| visible(l.trim()))
    };
    if ok {
        return Ok(last(stdout).unwrap_or_else(|| "done".into()));
    }
    let error = stderr
        .lines()
        .find(|l| l.starts_with("lazaret: ") && !l.starts_with("lazaret: ["))
        .map(|l| visible(l.trim_start_matches("lazaret: ")))
        .or_else(|| last(stderr))
        .unwrap_or_else(|| match code {
            Some(c) => format!("it failed with exit code {c}"),
            None => "it was killed".into(),
        });
    Err(error)
}

#[cfg(test)]
mod tests {
    use super::outcome;

    #[test]
    fn the_child_says_its_report_or_its_error_not_its_steps() {
        assert_eq!(
            outcome(
                true,
                "taking domain x down\ndomain x is checkpoint a again\n\n",
                "",
                Some(0)
            ),
            Ok("domain x is checkpoint a again".into())
        );
        let stderr =
            "lazaret: [ 0.1s] starting\nlazaret: cannot restore domain x: \x1b[31mno\nmore\n";
        assert_eq!(
            outcome(false, "", stderr, Some(1)),
            Err("cannot restore domain x: ␛[31mno".into())
        );
        assert_eq!(outcome(false, "", "", None), Err("it was killed".into()));
    }
}
