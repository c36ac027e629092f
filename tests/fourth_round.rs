//! Issue 40, the fourth look as the attacker, played from inside a real
//! sandbox as the agent would (runc and runsc), each attack followed by a
//! check that the host is unharmed and the user was told:
//!
//! - the agent plays the Session Host (it reads the token from the real
//!   host's command line, kills it and connects in its place) and
//!   announces 64 sessions at 65535x65535 with 200 KiB command lines,
//!   then 700 announce-and-exit pairs: the coordinator's memory stays
//!   within its screen budget, the state store within its bound, and an
//!   escalation still works;
//! - the agent races the `.git` quarantine, swapping a new `.git` for a
//!   symlink to a canary outside the workspace while auto-approved
//!   commands run: the canary keeps its mode;
//! - the agent makes its branch ref a 1 GiB sparse file: the coordinator
//!   and `lazaret domains` read none of it, and say why.

mod common;

use std::time::{Duration, Instant};

use common::sandbox::Domain;
use common::{ESCALATE as ESC, text};
use lazaret::coordinator::bounds::SCREEN_BUDGET;

/// A process's resident memory in bytes (as root, any process's).
fn rss_of(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("cannot read the status of process {pid}: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb << 10)
        .unwrap_or_else(|| panic!("no VmRSS for process {pid}"))
}

fn coordinator_pid(d: &Domain) -> i32 {
    let s = d.status().expect("the domain is listed");
    s["coordinator_pid"].as_i64().expect("a coordinator pid") as i32
}

fn coordinator_log(d: &Domain) -> String {
    let log = d.domain_root().join("coordinator.log");
    let mut text =
        std::fs::read_to_string(lazaret::coordinator::log::rotated(&log)).unwrap_or_default();
    text.push_str(&std::fs::read_to_string(&log).unwrap_or_default());
    text
}

/// The agent's impersonation of the Session Host, in perl (the image has
/// it): finds the real host by its command line (`lazaret-escalate
/// session-host SOCKET TOKEN`), takes its token, kills it, connects in its
/// place, and announces: 64 sessions at 65535x65535, then 700 that end at
/// once, every one with a 200 KiB command line. Prints what it sent.
const IMPERSONATE: &str = r#"perl -MIO::Socket::UNIX -e '
    $SIG{PIPE} = "IGNORE";
    sub frame { my ($k, $s, $p) = @_; pack("NCN", 5 + length $p, $k, $s) . $p }
    # The real host, its token from its command line; killed.
    sub host {
        my (@pids, $tok);
        opendir(my $d, "/proc") or die "no /proc";
        for my $p (grep { /^\d+$/ } readdir $d) {
            next if $p == $$;
            open(my $f, "<", "/proc/$p/cmdline") or next;
            local $/; my @a = split /\0/, <$f>;
            for my $i (0 .. $#a - 2) {
                if ($a[$i] eq "session-host") { push @pids, $p; $tok = $a[$i + 2] }
            }
        }
        return undef unless @pids;
        print STDERR "host @pids, token ", length $tok, " chars\n";
        kill 9, @pids;
        return $tok;
    }
    sub uuid {
        my @b = map { int rand 256 } 1..16;
        $b[6] = ($b[6] & 0x0f) | 0x40; $b[8] = ($b[8] & 0x3f) | 0x80;
        my $h = unpack("H*", pack("C*", @b));
        join "-", substr($h,0,8), substr($h,8,4), substr($h,12,4), substr($h,16,4), substr($h,20,12);
    }
    my $argv = "A" x (200 * 1024);
    sub live { my ($id, $r, $c) = @_;
        frame(6, $id, qq({"argv":["$argv","x"],"session_id":") . uuid() . qq(","rows":$r,"cols":$c,"pid":7})) }
    # Taken in once the coordinator has seen the real host go: until
    # then it closes the connection, and a write after fails. A host the
    # coordinator started meanwhile (a spare session was being made) has
    # a new token: found and killed in turn.
    my $s;
    ATTEMPT: for my $attempt (1..20) {
        my $tok = host() or do { select(undef, undef, undef, 0.5); next };
        for (1..15) {
            select(undef, undef, undef, 0.2);
            $s = IO::Socket::UNIX->new(Peer => "/run/lazaret/sessions.sock") or next;
            print $s frame(1, 0, $tok);
            select(undef, undef, undef, 0.3);
            last ATTEMPT if print $s frame(7, 0, "\0");
            undef $s;
        }
        print STDERR "attempt $attempt: not taken in\n";
    }
    die "cannot connect in the host s place\n" unless $s;
    my $sent = 0;
    for my $id (1..64) { print $s live($id, 65535, 65535) or die "write: $!"; $sent++ }
    for my $id (1000..1699) {
        print $s live($id, 24, 80) or die "write: $!";
        print $s frame(3, $id, pack("N", 0)) or die "write: $!";
        $sent++;
    }
    sleep 5;
    print "SENT $sent\n";
'"#;

fn an_impersonated_session_host_is_bounded(profile: &'static str) {
    let d = Domain::new(profile);
    let holder = d.hold_up();
    // A hosted session, so that the real Session Host runs.
    let t = d.tmux(100, 30, &format!("attach --new -p {profile}"), None);
    t.wait_for(120, "the hosted session's prompt", |s| s.contains("root@"));
    let pid = coordinator_pid(&d);
    let store = d.domain_root().join("state.redb");
    let (rss_before, store_before) = (rss_of(pid), std::fs::metadata(&store).unwrap().len());
    let records_before = d.audit_json().len();

    let started = Instant::now();
    let (code, out, err) = d.sh(IMPERSONATE);
    assert_eq!(
        code,
        0,
        "the attack itself failed: {out}{err}\ncoordinator log:\n{}",
        coordinator_log(&d)
    );
    assert!(out.contains("SENT 764"), "{out}{err}");
    let rss_after = rss_of(pid);
    let store_after = std::fs::metadata(&store).unwrap().len();
    eprintln!(
        "{profile}: coordinator RSS {} -> {} MiB, state store {} -> {} KiB, after {:?}",
        rss_before >> 20,
        rss_after >> 20,
        store_before >> 10,
        store_after >> 10,
        started.elapsed()
    );
    assert_eq!(coordinator_pid(&d), pid, "the coordinator lived through it");
    assert!(
        rss_after < rss_before + SCREEN_BUDGET,
        "the coordinator grew from {} to {} MiB",
        rss_before >> 20,
        rss_after >> 20
    );

    // Escalation keeps working.
    let (code, out, err) = d.exec_sh(&format!("{ESC} -- echo escalated-after-the-host"));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("escalated-after-the-host"), "{out}{err}");

    // The user was told; the store holds a bounded number of bounded
    // records.
    let records = d.audit_json();
    let added = &records[records_before..];
    let adopted = added
        .iter()
        .filter(|r| r["kind"] == "session-adopt")
        .count();
    let refused: Vec<&serde_json::Value> = added
        .iter()
        .filter(|r| r["kind"] == "session-host-refused")
        .collect();
    let biggest = added
        .iter()
        .map(|r| serde_json::to_vec(r).unwrap().len())
        .max()
        .unwrap_or(0);
    eprintln!(
        "{profile}: {} records added ({adopted} adoptions, {} refusals told), the largest {biggest} bytes",
        added.len(),
        refused.len()
    );
    assert!(adopted <= 64, "{adopted} adoptions recorded");
    assert!(
        refused.iter().any(|r| r["data"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("screen memory")),
        "the budget's refusal was told: {refused:?}"
    );
    assert!(
        refused.iter().any(|r| r["data"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("sessions announced by the Session Host refused")),
        "the rate's refusal was told: {refused:?}"
    );
    assert!(added.len() < 400, "{} records added", added.len());
    assert!(biggest < 80 << 10, "a record of {biggest} bytes");
    assert!(
        store_after < store_before + (32 << 20),
        "the store grew from {store_before} to {store_after} bytes"
    );
    assert!(coordinator_log(&d).contains("refused"));
    drop(t);
    let mut holder = holder;
    let _ = holder.kill();
    let _ = holder.wait();
    d.down();
}

#[test]
fn an_impersonated_session_host_is_bounded_under_runc() {
    an_impersonated_session_host_is_bounded("rc");
}

#[test]
fn an_impersonated_session_host_is_bounded_under_runsc() {
    an_impersonated_session_host_is_bounded("gv");
}

/// How long the agent races the quarantine. The attack of issue 40 took
/// the canary in 6 s under runc and about 100 s under runsc.
const RACE: Duration = Duration::from_secs(120);

/// The agent's racer, in perl: in the workspace's `sub`, a `.git` folder
/// and a symlink to the canary (a host path, outside the workspace) trade
/// places as fast as it can (`renameat2` with `RENAME_EXCHANGE`, x86-64
/// system call 316; where the kernel refuses it, by hand), so that `.git`
/// is the folder half the time and the symlink the other half; what the
/// quarantine moved aside is cleared so that it goes on. Runs for `secs`
/// seconds in the background and counts its rounds in /tmp/racer.
fn racer(canary: &std::path::Path, secs: u64) -> String {
    format!(
        r#"mkdir -p /workspace/sub && cd /workspace/sub && perl -e '
    my $end = time + {secs}; my $n = 0; my $x = 0; my ($g, $s) = (".git", "swap");
    while (time < $end) {{
        mkdir $g unless -e $g || -l $g;
        unless (-l $g || -l $s) {{ rmdir $s; symlink("{canary}", $s) }}
        if (syscall(316, -100, $g, -100, $s, 2) == 0) {{ $x++ }} else {{
            rmdir $g; symlink("{canary}", $g); unlink $g;
        }}
        if (++$n % 500 == 0) {{
            for my $q (glob(".git.lazaret-quarantine*")) {{ unlink $q or rmdir $q }}
            open(my $f, ">", "/tmp/racer"); print $f "$n rounds, $x exchanges"; close $f;
        }}
    }}' </dev/null >/dev/null 2>&1 &"#,
        canary = canary.display()
    )
}

fn the_quarantine_is_not_led_outside(profile: &'static str) {
    use std::os::unix::fs::PermissionsExt;
    let d = Domain::new(profile);
    let holder = d.hold_up();
    let canary = d.s.mkdir("canary");
    std::fs::set_permissions(&canary, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mode = || std::fs::metadata(&canary).unwrap().permissions().mode() & 0o7777;
    let (code, out, err) = d.sh(&racer(&canary, RACE.as_secs()));
    assert_eq!(code, 0, "{out}{err}");
    // Auto-approved commands, one after another: each is followed by a
    // walk of the workspace for new `.git` entries.
    // A command whose scan saw the racer's `.git` and found it swapped
    // when it started is refused (EAGAIN): the agent's race refuses its
    // own command, and the next one runs.
    let started = Instant::now();
    let (mut ran, mut refused) = (0, 0);
    while started.elapsed() < RACE {
        let (code, out, err) = d.exec_sh(&format!(
            "for i in 1 2 3 4 5 6 7 8 9 10; do {ESC} -- true; echo rc=$?; done"
        ));
        assert_eq!(code, 0, "{out}{err}");
        ran += out.matches("rc=0").count();
        let refusals = out.matches("rc=").count() - out.matches("rc=0").count();
        if refusals > 0 {
            assert!(
                err.contains("the workspace changed while the command was being started"),
                "a refusal says why: {err}"
            );
        }
        refused += refusals;
        assert_eq!(
            mode(),
            0o755,
            "the canary outside the workspace changed after {ran} commands ({:?})",
            started.elapsed()
        );
    }
    let rounds = d.sh("cat /tmp/racer").1;
    let log = coordinator_log(&d);
    let quarantined = log.matches("which host git would obey").count();
    eprintln!(
        "{profile}: {ran} auto-approved commands ran ({refused} refused by the race) in {:?} beside {} racer rounds; {quarantined} quarantines logged; canary mode {:o}",
        started.elapsed(),
        rounds.trim(),
        mode()
    );
    assert!(ran > 50, "only {ran} commands ran");
    assert!(rounds.contains("rounds"), "the racer ran: {rounds:?}");
    assert!(quarantined > 0, "the quarantine met the racer's entries");
    assert_eq!(mode(), 0o755);
    let mut holder = holder;
    let _ = holder.kill();
    let _ = holder.wait();
    d.down();
}

#[test]
fn the_quarantine_is_not_led_outside_under_runc() {
    the_quarantine_is_not_led_outside("rc");
}

#[test]
fn the_quarantine_is_not_led_outside_under_runsc() {
    the_quarantine_is_not_led_outside("gv");
}

/// The agent makes its branch ref a 1 GiB sparse file: the coordinator,
/// which reads it to propagate the branch, and `lazaret domains`, which
/// reads it to tell whether deleting the clone would lose commits, read
/// none of it, and say why. Under runsc a checkpoint of it is taken, and
/// its restore is refused with the reason, then restores with `--force`.
fn a_sparse_ref_costs_nothing(profile: &'static str) {
    let d = Domain::new(profile);
    common::git_repo(&d.ws());
    // A hosted session holds the domain up (a checkpoint refuses while a
    // plain one runs).
    let t = d.tmux(100, 30, &format!("attach --new -p {profile}"), None);
    t.wait_for(120, "the hosted session's prompt", |s| s.contains("root@"));
    let pid = coordinator_pid(&d);
    let before = rss_of(pid);
    let (code, out, err) = d.sh(
        "cd /workspace && b=$(git branch --show-current) && f=$(git rev-parse --git-path refs/heads/$b) \
         && rm -f $f && truncate -s 1G $f && ls -ls $f && echo branch=$b",
    );
    assert_eq!(code, 0, "the attack itself failed: {out}{err}");
    // Propagation follows a change of the ref within moments.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !coordinator_log(&d).contains("larger than the 512 bytes") {
        assert!(
            Instant::now() < deadline,
            "the coordinator did not say why it did not propagate the branch:\n{}",
            coordinator_log(&d)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let after = rss_of(pid);
    let out = d.lazaret_raw(&["domains", "list"]);
    let (o, e) = text(&out);
    eprintln!(
        "{profile}: coordinator RSS {} -> {} MiB; lazaret domains: {o}{e}",
        before >> 20,
        after >> 20
    );
    assert!(out.status.success(), "{o}{e}");
    assert!(
        after < before + (64 << 20),
        "the coordinator grew from {} to {} MiB",
        before >> 20,
        after >> 20
    );
    if profile == "gv" {
        let out = d.lazaret(&["checkpoint", "--name", "sparse"]);
        let (o, e) = text(&out);
        assert!(out.status.success(), "{o}{e}");
        let out = d.lazaret_raw(&["restore", "sparse", "-p", profile]);
        let (o, e) = text(&out);
        eprintln!("{profile}: restore: {o}{e}");
        assert!(!out.status.success(), "{o}{e}");
        assert!(
            e.contains("cannot tell what restoring checkpoint sparse would set back")
                && e.contains("larger than the 512 bytes")
                && e.contains("--force"),
            "{e}"
        );
        let out = d.lazaret_raw(&["restore", "sparse", "-p", profile, "--force"]);
        let (o, e) = text(&out);
        eprintln!("{profile}: restore --force: {o}{e}");
        assert!(out.status.success(), "{o}{e}");
        assert!(o.contains("is checkpoint sparse again"), "{o}");
    }
    drop(t);
    d.down();
}

#[test]
fn a_sparse_ref_costs_nothing_under_runc() {
    a_sparse_ref_costs_nothing("rc");
}

#[test]
fn a_sparse_ref_costs_nothing_and_its_checkpoint_restores_under_runsc() {
    a_sparse_ref_costs_nothing("gv");
}

/// A set-user-ID file of one of the agent's other ids (a subordinate id
/// on the host, which the user cannot change) is fixed at `down` by
/// Lazaret's own walk run in the user's podman namespace (`lazaret
/// strip-trap`), which follows no symlink, rather than by `chmod` on its
/// path. Under runsc a bare `podman exec` lands the bit (runc's seccomp
/// refuses it).
#[test]
fn a_set_id_file_of_another_id_is_fixed_at_down_under_runsc() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let d = Domain::new("gvd");
    let holder = d.hold_up();
    let (code, out, err) = d.sh(
        "cd /workspace && cp /bin/true other-suid && chown 1000:1000 other-suid \
         && chmod 4755 other-suid && ls -ln other-suid",
    );
    assert_eq!(code, 0, "{out}{err}");
    let file = d.ws().join("other-suid");
    let meta = std::fs::metadata(&file).unwrap();
    let user = common::test_user().expect("LAZARET_TEST_USER is set");
    assert_ne!(meta.uid(), user.uid, "owned by a subordinate id: {out}");
    assert_eq!(meta.permissions().mode() & 0o6000, 0o4000, "the bit landed");
    let mut holder = holder;
    let _ = holder.kill();
    let _ = holder.wait();
    d.down();
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o6000, 0, "the bit is gone after down ({mode:o})");
}

/// What the agent left in a direct-mode workspace owned by its other ids
/// is given back to the user at `down` by Lazaret's own walk in the user's
/// namespace (`lazaret reclaim`), which follows no symlink: a folder of
/// another id with mode 000 becomes the user's, with the user's rwx, and
/// a symlink of another id to a file of the user's outside the workspace
/// changes nothing there.
#[test]
fn what_other_ids_left_is_given_back_without_following_links_under_runc() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let d = Domain::new("rcd");
    let holder = d.hold_up();
    let outside = d.s.write("outside-file", "the user's");
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o640)).unwrap();
    let (code, out, err) = d.sh(&format!(
        "cd /workspace && mkdir -p left/inner && touch left/inner/f && ln -s {} left/link \
         && chown -Rh 1000:1000 left && chmod 000 left/inner && chmod 000 left && ls -lnd left",
        outside.display()
    ));
    assert_eq!(code, 0, "{out}{err}");
    let user = common::test_user().expect("LAZARET_TEST_USER is set");
    let left = d.ws().join("left");
    assert_ne!(std::fs::metadata(&left).unwrap().uid(), user.uid, "{out}");
    let mut holder = holder;
    let _ = holder.kill();
    let _ = holder.wait();
    d.down();
    for p in [left.clone(), left.join("inner"), left.join("inner/f")] {
        let m = std::fs::symlink_metadata(&p).unwrap();
        assert_eq!(m.uid(), user.uid, "{} is the user's", p.display());
    }
    let m = std::fs::symlink_metadata(left.join("link")).unwrap();
    assert_eq!(m.uid(), user.uid, "the link itself is the user's");
    assert_eq!(
        std::fs::metadata(&left).unwrap().permissions().mode() & 0o700,
        0o700
    );
    let o = std::fs::metadata(&outside).unwrap();
    assert_eq!(
        (o.permissions().mode() & 0o7777, o.uid()),
        (0o640, user.uid),
        "the file outside is unchanged"
    );
}
