//! Issue 27 (smaller): an agent image build shows one line per step of its
//! recipe with the time, keeps podman's whole output in a private log whose
//! path it prints, and leaves no untagged image behind (its build stage, or
//! the image a rebuild replaced); `image list` and `image prune` show and
//! remove the untagged images Lazaret left, and never the user's.
//!
//! The recipes are the tests' own, small and multi-stage like the real
//! ones, read through LAZARET_AGENT_RECIPES under names no other test uses.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use common::sandbox::Domain;
use common::{STANDARD_PATH, podman, text};

/// A recipe like the real ones (a fetch stage, then the image), whose
/// fetch stage prints many lines, ending with `last` as its final step.
fn recipe(name: &str, last: &str) -> String {
    format!(
        "ARG BASE=localhost/lazaret/trixie:latest\n\
         FROM ${{BASE}} AS fetch\n\
         RUN for i in $(seq 1 60); do echo \"noise line $i\"; done; echo fetched > /fetched\n\
         ARG AGENT_VERSION=latest\n\
         RUN mkdir -p /etc/lazaret && echo 1.0 > /agent-version\n\
         FROM ${{BASE}}\n\
         COPY --from=fetch /fetched /fetched\n\
         COPY --from=fetch /agent-version /etc/lazaret/agent-version\n\
         LABEL lazaret.agent={name}\n\
         {last}\n"
    )
}

/// Ids of every image (intermediate ones too) labelled as `agent`'s.
fn images_of(agent: &str) -> Vec<String> {
    let out = podman(&[
        "images",
        "-a",
        "-q",
        "--no-trunc",
        "--filter",
        &format!("label=lazaret.agent={agent}"),
    ]);
    let mut ids: Vec<String> = text(&out)
        .0
        .lines()
        .map(|l| l.trim_start_matches("sha256:").to_string())
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Removes the images of these ids (the test's own) when dropped.
struct Ids(Vec<String>);

impl Drop for Ids {
    fn drop(&mut self) {
        for id in &self.0 {
            let _ = podman(&["rmi", "-f", id]);
        }
    }
}

/// Removes every image of `agent` (the test's own names) when dropped.
struct Images(String);

impl Drop for Images {
    fn drop(&mut self) {
        for id in images_of(&self.0) {
            let _ = podman(&["rmi", "-f", &id]);
        }
    }
}

/// `lazaret image build --agent NAME` with the test's recipes and state
/// folder: (success, stderr).
fn build(d: &Domain, name: &str) -> (bool, String) {
    let recipes = d.s.path().join("recipes");
    let state = d.s.path().join("state");
    let out = d
        .cmd_raw_env(
            STANDARD_PATH,
            &[
                ("LAZARET_AGENT_RECIPES", recipes.to_str().unwrap()),
                ("XDG_STATE_HOME", state.to_str().unwrap()),
            ],
            &["image", "build", "--agent", name],
        )
        .output()
        .unwrap();
    let (o, e) = text(&out);
    eprintln!("build of {name}:\n{o}{e}");
    (out.status.success(), e)
}

#[test]
fn agent_build_shows_its_steps_and_keeps_its_log() {
    let d = Domain::new("rc");
    let name = format!("i27steps{}", std::process::id());
    let _cleanup = Images(name.clone());
    d.s.write(
        &format!("recipes/{name}/Containerfile"),
        &recipe(&name, "CMD [\"true\"]"),
    );
    d.s.mkdir("state");
    let log =
        d.s.path()
            .join(format!("state/lazaret/logs/image-build-agent-{name}.log"));

    let (ok, err) = build(&d, &name);
    assert!(ok, "{err}");
    // The log's path comes first, before any step.
    let first = err.lines().next().unwrap_or_default();
    assert!(first.contains(&log.display().to_string()), "{err}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("noise line 60"), "{logged}");
    assert!(
        !err.contains("noise line 60"),
        "podman's output on the terminal:\n{err}"
    );
    // One line per step, and one for writing the image, each with its
    // time, and nothing else of podman's.
    let steps = logged.lines().filter(|l| l.contains("STEP ")).count();
    assert!(steps >= 9, "{logged}");
    let timed: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("lazaret: ["))
        .collect();
    for line in &timed {
        let rest = &line["lazaret: [".len()..];
        let (secs, what) = rest.split_once("s] ").unwrap_or_else(|| panic!("{line}"));
        assert!(secs.trim().parse::<f64>().is_ok(), "{line}");
        assert!(what.chars().count() <= 110, "{line}");
    }
    assert_eq!(
        timed.iter().filter(|l| l.contains("STEP ")).count(),
        steps,
        "{err}"
    );
    assert_eq!(
        timed
            .iter()
            .filter(|l| l.contains("] COMMIT ") && l.ends_with("writing the image"))
            .count(),
        1,
        "{err}"
    );
    assert!(err.lines().count() <= steps + 3, "{err}");
    // Private: the folder 0700, the file 0600.
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&log), 0o600);
    assert_eq!(mode(log.parent().unwrap()), 0o700);
    // No build stage left: the tagged image is the only one of its label.
    let tagged = podman(&[
        "image",
        "inspect",
        "--format",
        "{{.Id}}",
        &format!("localhost/lazaret/agent-{name}:latest"),
    ]);
    let first_id = text(&tagged).0.trim().to_string();
    assert_eq!(images_of(&name), std::slice::from_ref(&first_id));

    // A rebuild replaces the image, and the one it replaced goes.
    let (ok, err) = build(&d, &name);
    assert!(ok, "{err}");
    let ids = images_of(&name);
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_ne!(ids[0], first_id, "not rebuilt");

    // A failed build says where its whole output is.
    let broken = format!("{name}x");
    let _cleanup_broken = Images(broken.clone());
    d.s.write(
        &format!("recipes/{broken}/Containerfile"),
        &recipe(&broken, "RUN echo before-the-failure && false"),
    );
    let (ok, err) = build(&d, &broken);
    assert!(!ok, "{err}");
    let broken_log = log.with_file_name(format!("image-build-agent-{broken}.log"));
    assert!(
        err.contains(&format!(
            "The whole build's output is in {}",
            broken_log.display()
        )),
        "{err}"
    );
    assert!(err.contains("before-the-failure"), "{err}");
    assert_eq!(
        images_of(&broken),
        Vec::<String>::new(),
        "a failed build left images"
    );
    assert!(
        std::fs::read_to_string(&broken_log)
            .unwrap()
            .contains("noise line 60")
    );
}

/// A tarball holding one file, imported as `name` with `changes`, then
/// untagged: an untagged image whose id is returned.
fn untagged_image(d: &Domain, name: &str, content: &str, changes: &[&str]) -> String {
    let file = d.s.write(&format!("{name}.txt"), content);
    let tarball = d.s.path().join(format!("{name}.tar"));
    let ok = Command::new("tar")
        .arg("-C")
        .arg(d.s.path())
        .arg("-cf")
        .arg(&tarball)
        .arg(file.file_name().unwrap())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    d.s.chown(&tarball);
    let tag = format!("localhost/{name}:x");
    let mut args = vec!["import"];
    for c in changes {
        args.extend(["--change", c]);
    }
    args.extend([tarball.to_str().unwrap(), tag.as_str()]);
    let out = podman(&args);
    assert!(out.status.success(), "{}", text(&out).1);
    let id = text(&podman(&["image", "inspect", "--format", "{{.Id}}", &tag]))
        .0
        .trim()
        .to_string();
    let out = podman(&["untag", &tag]);
    assert!(out.status.success(), "{}", text(&out).1);
    id
}

#[test]
fn untagged_images_of_lazaret_are_listed_and_pruned_and_the_users_are_not() {
    let d = Domain::new("rc");
    let pid = std::process::id();
    let agent = format!("i27left{pid}");
    let ours = untagged_image(
        &d,
        &format!("i27ours{pid}"),
        "ours",
        &[&format!("LABEL lazaret.agent={agent}")],
    );
    let users = untagged_image(&d, &format!("i27users{pid}"), "the user's", &[]);
    let _cleanup = Ids(vec![ours.clone(), users.clone()]);
    let short = |id: &str| id.chars().take(12).collect::<String>();

    let out = d
        .cmd_raw(STANDARD_PATH, &["image", "list", "--json"])
        .output()
        .unwrap();
    let (o, e) = text(&out);
    assert!(out.status.success(), "{e}");
    let rows: serde_json::Value = serde_json::from_str(&o).unwrap();
    let row = |id: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .cloned()
    };
    let listed = row(&ours).unwrap_or_else(|| panic!("ours not listed: {o}"));
    assert_eq!(listed["dangling"], true, "{listed}");
    assert_eq!(listed["agent"], agent.as_str(), "{listed}");
    assert!(row(&users).is_none(), "the user's image is listed: {o}");

    let out = d
        .cmd_raw(STANDARD_PATH, &["image", "list"])
        .output()
        .unwrap();
    let o = text(&out).0;
    assert!(
        o.contains(&format!(
            "<untagged {}> localhost/lazaret/agent-{agent}",
            short(&ours)
        )),
        "{o}"
    );
    assert!(o.contains("`lazaret image prune` removes them"), "{o}");
    assert!(!o.contains(&short(&users)), "{o}");

    let out = d
        .cmd_raw(STANDARD_PATH, &["image", "prune", "--dry-run"])
        .output()
        .unwrap();
    let o = text(&out).0;
    assert!(
        o.contains(&format!("would remove untagged {}", short(&ours))),
        "{o}"
    );
    assert!(!o.contains(&short(&users)), "{o}");

    // Real removal only in the test's own repository (the test user's
    // images are shared with other tests).
    let repo = format!("localhost/lazaret/agent-{agent}");
    let out = d
        .cmd_raw(STANDARD_PATH, &["image", "prune", &repo])
        .output()
        .unwrap();
    let (o, e) = text(&out);
    assert!(out.status.success(), "{o}{e}");
    assert!(
        o.contains(&format!("removed untagged {}", short(&ours))),
        "{o}"
    );
    let exists = |id: &str| podman(&["image", "exists", id]).status.success();
    assert!(!exists(&ours), "ours is left");
    assert!(exists(&users), "the user's image was removed");
}
