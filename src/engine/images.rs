//! Images built locally: the Debian base image for agents, and the Network
//! Sidecar's `FROM scratch` image holding one static binary.

use crate::agents::{
    AGENT_INSTRUCTIONS, AGENT_REPOSITORY, AGENT_VERSION_FILE, agent_names, agent_of_image,
    agent_recipe, agent_recipe_digest,
};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::install::{SIDECAR_BINARY, find_helper};
use crate::podman::{Podman, PodmanError};

/// Repository of the base images `lazaret image build` makes.
pub const BASE_REPOSITORY: &str = "localhost/lazaret";
/// Repository of the sidecar image, tagged by the binary's digest.
pub const SIDECAR_REPOSITORY: &str = "localhost/lazaret/sidecar";
/// Where the sidecar binary sits in its image.
pub const SIDECAR_PATH: &str = "/lazaret-sidecar";
/// Packages every base image gets: git for the agent's repository, the
/// certificates, and the tools a person expects in a shell.
pub const BASE_PACKAGES: &[&str] = &[
    "git",
    "ca-certificates",
    "procps",
    "iproute2",
    "ncurses-bin",
    "ncurses-term",
    "less",
];

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error(transparent)]
    Podman(#[from] PodmanError),
    #[error(
        "`{0}` not found next to lazaret or in /usr/local/lib/lazaret; build and install it with sudo scripts/setup"
    )]
    MissingHelper(&'static str),
    #[error(
        "{path} is an older build than this lazaret (its `--version` lacks `{feature}`: its sessions would not wait for the sandbox's self-test); install matching helpers with sudo scripts/setup, or point LAZARET_LIBEXEC_DIR at them"
    )]
    StaleHelper {
        path: PathBuf,
        feature: &'static str,
    },
    #[error("{what}: {error}")]
    Io { what: String, error: std::io::Error },
    #[error(
        "mmdebstrap failed ({status}); its last lines:\n{tail}\nCheck the mirror is reachable, or pass --mirror"
    )]
    Bootstrap { status: String, tail: String },
    #[error(
        "mmdebstrap is not installed; it builds the base image without root: sudo apt-get install mmdebstrap"
    )]
    NoMmdebstrap,
    #[error("`{0}` is not a package name")]
    BadPackage(String),
    #[error("`{agent}` is not an agent Lazaret has a recipe for; known: {known}")]
    UnknownAgent { agent: String, known: String },
    #[error(
        "the base image `{0}` is not in local storage; build it first with `lazaret image build`"
    )]
    NoBase(String),
    #[error(
        "building the {agent} image failed ({status}); podman's last lines:\n{tail}\nThe whole build's output is in {log}. Check that the package registries are reachable from this machine (proxy variables and the CA bundle in /etc/ssl/certs are passed to the build)"
    )]
    AgentBuild {
        agent: String,
        status: String,
        tail: String,
        log: String,
    },
    #[error(
        "{path} cannot be read ({error}); with LAZARET_AGENT_RECIPES set, a recipe is read from FOLDER/NAME/Containerfile"
    )]
    Recipe { path: String, error: std::io::Error },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ImageError {
    let what = what.into();
    move |error| ImageError::Io { what, error }
}

/// SHA-256 of a file, hex.
pub fn file_sha256(path: &Path) -> Result<String, ImageError> {
    let mut f = std::fs::File::open(path).map_err(io(format!("cannot read {}", path.display())))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(io(format!("cannot read {}", path.display())))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// The sidecar image for the installed `lazaret-sidecar`, built when the
/// binary changed (the tag is the binary's digest). Returns the image name.
pub fn ensure_sidecar_image(podman: &Podman) -> Result<String, ImageError> {
    let binary = find_helper(SIDECAR_BINARY).ok_or(ImageError::MissingHelper(SIDECAR_BINARY))?;
    let digest = file_sha256(&binary)?;
    let image = format!("{SIDECAR_REPOSITORY}:{}", &digest[..12]);
    if podman.image_exists(&image)? {
        return Ok(image);
    }
    let dir = tempfile::tempdir().map_err(io("cannot create a temporary folder"))?;
    let tar_path = dir.path().join("sidecar.tar");
    let file = std::fs::File::create(&tar_path).map_err(io("cannot write the sidecar tarball"))?;
    let mut tar = tar::Builder::new(file);
    let data = std::fs::read(&binary).map_err(io(format!("cannot read {}", binary.display())))?;
    let mut header = tar::Header::new_gnu();
    header.set_size(data.len() as u64);
    header.set_mode(0o755);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    header.set_cksum();
    tar.append_data(
        &mut header,
        SIDECAR_PATH.trim_start_matches('/'),
        data.as_slice(),
    )
    .and_then(|()| tar.finish())
    .map_err(io("cannot write the sidecar tarball"))?;
    drop(tar);
    podman.run_with(
        [
            "import".as_ref(),
            "--quiet".as_ref(),
            "--change".as_ref(),
            format!("ENTRYPOINT [\"{SIDECAR_PATH}\"]").as_ref(),
            "--change".as_ref(),
            "CMD [\"hold\"]".as_ref(),
            "--change".as_ref(),
            format!("LABEL lazaret.sidecar.sha256={digest}").as_ref(),
            tar_path.as_os_str(),
            std::ffi::OsStr::new(&image),
        ],
        Duration::from_secs(120),
        None,
    )?;
    Ok(image)
}

/// What `lazaret image build` makes.
#[derive(Debug, Clone)]
pub struct BaseImageRequest {
    /// Debian release (suite), e.g. `trixie`.
    pub release: String,
    pub mirror: String,
    /// Packages beyond [`BASE_PACKAGES`].
    pub include: Vec<String>,
    /// Extra tag to apply (besides `{release}:{date}-{digest}` and `:latest`).
    pub tag: Option<String>,
}

/// The result of a base image build.
#[derive(Debug, Clone)]
pub struct BuiltImage {
    pub tags: Vec<String>,
    pub digest: String,
    pub tar_bytes: u64,
    pub bootstrap_time: Duration,
    pub import_time: Duration,
}

fn valid_package(p: &str) -> bool {
    // Debian policy: lower case letters, digits, + - . ; starts alphanumeric.
    p.len() >= 2
        && p.chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && p.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c))
}

/// Builds a Debian base image rootless (mmdebstrap in unshare mode, then
/// `podman import`). `progress` receives each line mmdebstrap prints.
pub fn build_base_image(
    podman: &Podman,
    req: &BaseImageRequest,
    scratch: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<BuiltImage, ImageError> {
    let mut packages: Vec<String> = BASE_PACKAGES.iter().map(|s| s.to_string()).collect();
    for p in &req.include {
        if !valid_package(p) {
            return Err(ImageError::BadPackage(p.clone()));
        }
        if !packages.contains(p) {
            packages.push(p.clone());
        }
    }
    if !valid_package(&req.release) {
        return Err(ImageError::BadPackage(req.release.clone()));
    }
    if crate::install::which("mmdebstrap").is_none() {
        return Err(ImageError::NoMmdebstrap);
    }
    std::fs::create_dir_all(scratch).map_err(io(format!("cannot create {}", scratch.display())))?;
    let dir = tempfile::Builder::new()
        .prefix("image-build-")
        .tempdir_in(scratch)
        .map_err(io("cannot create a temporary folder"))?;
    let tar_path: PathBuf = dir.path().join("rootfs.tar");

    let started = Instant::now();
    let mut child = Command::new("mmdebstrap")
        .args(["--mode=unshare", "--variant=minbase", "--format=tar"])
        .arg(format!("--include={}", packages.join(",")))
        .arg(&req.release)
        .arg(&tar_path)
        .arg(&req.mirror)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io("cannot run mmdebstrap"))?;
    // mmdebstrap reports on stderr; keep the tail for the error message.
    let stderr = child.stderr.take().expect("piped");
    let mut tail: Vec<String> = Vec::new();
    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
        progress(&line);
        tail.push(line);
        if tail.len() > 15 {
            tail.remove(0);
        }
    }
    let status = child.wait().map_err(io("cannot wait for mmdebstrap"))?;
    if !status.success() {
        return Err(ImageError::Bootstrap {
            status: status.to_string(),
            tail: tail.join("\n"),
        });
    }
    let bootstrap_time = started.elapsed();

    let digest = file_sha256(&tar_path)?;
    let tar_bytes = std::fs::metadata(&tar_path).map(|m| m.len()).unwrap_or(0);
    let date = podman_date();
    let main_tag = format!("{BASE_REPOSITORY}/{}:{date}-{}", req.release, &digest[..12]);
    let started = Instant::now();
    progress(&format!("importing into podman as {main_tag}"));
    podman.run_with(
        [
            "import".as_ref(),
            "--quiet".as_ref(),
            "--change".as_ref(),
            "CMD [\"/bin/bash\", \"-l\"]".as_ref(),
            "--change".as_ref(),
            format!("LABEL lazaret.base.digest={digest}").as_ref(),
            "--change".as_ref(),
            format!("LABEL lazaret.base.release={}", req.release).as_ref(),
            tar_path.as_os_str(),
            std::ffi::OsStr::new(&main_tag),
        ],
        Duration::from_secs(600),
        None,
    )?;
    let mut tags = vec![main_tag.clone()];
    let latest = format!("{BASE_REPOSITORY}/{}:latest", req.release);
    for extra in std::iter::once(&latest).chain(req.tag.as_ref()) {
        podman.run(["tag", main_tag.as_str(), extra.as_str()])?;
        tags.push(extra.clone());
    }
    Ok(BuiltImage {
        tags,
        digest,
        tar_bytes,
        bootstrap_time,
        import_time: started.elapsed(),
    })
}

/// The host's trusted certificate authorities, handed to builds as a secret.
pub const HOST_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// What `lazaret image build --agent NAME` makes.
#[derive(Debug, Clone)]
pub struct AgentImageRequest {
    pub agent: String,
    /// Base image to build FROM.
    pub base: String,
    /// Agent version to install (`latest` unless pinned).
    pub version: String,
}

/// The result of an agent image build.
#[derive(Debug, Clone)]
pub struct BuiltAgentImage {
    pub tags: Vec<String>,
    pub version: String,
    pub size_bytes: u64,
    pub build_time: Duration,
}

/// Names a folder of recipes (`NAME/Containerfile`) read instead of the
/// built-in ones: to try a recipe without building Lazaret again.
pub const RECIPES_ENV: &str = "LAZARET_AGENT_RECIPES";

/// An agent's recipe: its name, its Containerfile and the digest the
/// image's `lazaret.recipe` label carries.
struct Recipe {
    name: String,
    containerfile: String,
    digest: String,
}

/// The recipe of `agent`: from [`RECIPES_ENV`]'s folder when that is set
/// and holds one, else the built-in one.
fn recipe_for(agent: &str) -> Result<Recipe, ImageError> {
    if let Some(dir) = std::env::var_os(RECIPES_ENV).filter(|d| !d.is_empty())
        && !agent.contains('/')
    {
        let path = Path::new(&dir).join(agent).join("Containerfile");
        if path.exists() || agent_recipe(agent).is_none() {
            let containerfile =
                std::fs::read_to_string(&path).map_err(|error| ImageError::Recipe {
                    path: path.display().to_string(),
                    error,
                })?;
            let mut h = Sha256::new();
            h.update(containerfile.as_bytes());
            h.update([0]);
            h.update(AGENT_INSTRUCTIONS.as_bytes());
            return Ok(Recipe {
                name: agent.to_string(),
                containerfile,
                digest: hex::encode(&h.finalize()[..8]),
            });
        }
    }
    let recipe = agent_recipe(agent).ok_or_else(|| ImageError::UnknownAgent {
        agent: agent.to_string(),
        known: agent_names().join(", "),
    })?;
    Ok(Recipe {
        name: recipe.name.to_string(),
        containerfile: recipe.containerfile.to_string(),
        digest: agent_recipe_digest(recipe.name).unwrap_or_default(),
    })
}

/// A line of `podman build` that starts a step of the recipe
/// (`STEP 3/9: RUN ...`, `[1/2] STEP 2/4: ...` in a multi-stage build) or
/// the writing of the image (`COMMIT name`, which takes a while for a big
/// one), on one line with its runs of spaces folded and cut to `width`
/// characters; `None` for the rest of the output.
pub fn build_step(line: &str, width: usize) -> Option<String> {
    let rest = match line.strip_prefix('[') {
        Some(r) => r.split_once("] ")?.1,
        None => line,
    };
    if let Some(name) = rest.strip_prefix("COMMIT ") {
        return Some(format!("COMMIT {}: writing the image", name.trim()));
    }
    let number = rest.strip_prefix("STEP ")?.split_once(':')?.0;
    if !number
        .split('/')
        .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    let folded = line.split_whitespace().collect::<Vec<_>>().join(" ");
    Some(if folded.chars().count() > width {
        let mut cut: String = folded.chars().take(width.saturating_sub(1)).collect();
        cut.push('…');
        cut
    } else {
        folded
    })
}

/// Builds an agent image rootless with `podman build`, on the build's own
/// network. The host's CA bundle is mounted as a build secret (never in a
/// layer) and podman passes the host's proxy variables to the build's RUN
/// steps only; neither ends up in the image.
///
/// Every line podman prints goes to `log` (made private); `step` gets the
/// lines that start a step of the recipe. The build keeps no layer cache
/// (`--layers=false`): a multi-stage recipe's build stage leaves no
/// untagged image behind, and a rebuild installs the newest agent rather
/// than a cached one. The image the tags leave (the previous build) is
/// removed when nothing else names or runs it.
pub fn build_agent_image(
    podman: &Podman,
    req: &AgentImageRequest,
    scratch: &Path,
    log: &Path,
    step: &mut dyn FnMut(&str),
) -> Result<BuiltAgentImage, ImageError> {
    let recipe = recipe_for(&req.agent)?;
    if !podman.image_exists(&req.base)? {
        return Err(ImageError::NoBase(req.base.clone()));
    }
    std::fs::create_dir_all(scratch).map_err(io(format!("cannot create {}", scratch.display())))?;
    let dir = tempfile::Builder::new()
        .prefix("agent-build-")
        .tempdir_in(scratch)
        .map_err(io("cannot create a temporary folder"))?;
    let ctx = dir.path();
    std::fs::write(ctx.join("Containerfile"), &recipe.containerfile)
        .map_err(io("cannot write the Containerfile"))?;
    std::fs::write(ctx.join("instructions.md"), AGENT_INSTRUCTIONS)
        .map_err(io("cannot write the instruction file"))?;
    // An empty bundle when the host has none: the installers then use their own.
    let ca = ctx.join("ca.crt");
    let bundle = std::fs::read(HOST_CA_BUNDLE).unwrap_or_default();
    std::fs::write(&ca, bundle).map_err(io("cannot copy the host's CA bundle"))?;

    let mut log_file = open_log(log)?;
    let build_tag = format!("{AGENT_REPOSITORY}{}:build", recipe.name);
    let started = Instant::now();
    let mut child = Command::new(podman.program())
        .arg("build")
        .arg("--layers=false")
        .arg("--http-proxy=true")
        .arg(format!("--secret=id=ca,src={}", ca.display()))
        .arg(format!("--build-arg=BASE={}", req.base))
        .arg(format!("--build-arg=AGENT_VERSION={}", req.version))
        .arg(format!("--label=lazaret.agent={}", recipe.name))
        .arg(format!("--label=lazaret.recipe={}", recipe.digest))
        .arg("-t")
        .arg(&build_tag)
        .arg("-f")
        .arg(ctx.join("Containerfile"))
        .arg(ctx)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| ImageError::Podman(PodmanError::Spawn(e)))?;
    // podman build writes steps to stdout and errors to stderr: merge both.
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let tx2 = tx.clone();
    let t = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx2.send(line);
        }
    });
    let stdout = child.stdout.take().expect("piped");
    let t2 = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut tail: Vec<String> = Vec::new();
    for line in rx {
        use std::io::Write as _;
        // A full disk must not stop the build: the tail still says why.
        let _ = writeln!(log_file, "{line}");
        if let Some(s) = build_step(&line, 110) {
            step(&s);
        }
        tail.push(line);
        if tail.len() > 20 {
            tail.remove(0);
        }
    }
    let _ = t.join();
    let _ = t2.join();
    let status = child.wait().map_err(io("cannot wait for podman build"))?;
    if !status.success() {
        return Err(ImageError::AgentBuild {
            agent: recipe.name,
            status: status.to_string(),
            tail: tail.join("\n"),
            log: log.display().to_string(),
        });
    }
    let build_time = started.elapsed();
    let version = podman
        .run([
            "run",
            "--rm",
            "--network=none",
            "--entrypoint=cat",
            build_tag.as_str(),
            AGENT_VERSION_FILE,
        ])?
        .trim()
        .to_string();
    let version = if version.is_empty() {
        "unknown".to_string()
    } else {
        version
    };
    let mut tags = Vec::new();
    let mut previous = Vec::new();
    for t in [version.as_str(), "latest"] {
        let tag = format!("{AGENT_REPOSITORY}{}:{t}", recipe.name);
        previous.extend(image_id(podman, &tag));
        podman.run(["tag", build_tag.as_str(), tag.as_str()])?;
        tags.push(tag);
    }
    let _ = podman.run(["untag", build_tag.as_str(), build_tag.as_str()]);
    let built = image_id(podman, &tags[0]);
    previous.dedup();
    for id in previous.iter().filter(|id| Some(*id) != built.as_ref()) {
        remove_if_left_over(podman, id, &recipe.name);
    }
    let size_bytes = podman
        .run([
            "image",
            "inspect",
            "--format",
            "{{.Size}}",
            tags[0].as_str(),
        ])?
        .trim()
        .parse()
        .unwrap_or(0);
    Ok(BuiltAgentImage {
        tags,
        version,
        size_bytes,
        build_time,
    })
}

/// Opens (truncating) a build's log, private to the user: the build's
/// output can name the registries and proxies the build went through.
fn open_log(log: &Path) -> Result<std::fs::File, ImageError> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = log.parent() {
        crate::rundir::create_private_dir(dir)
            .map_err(io(format!("cannot create {}", dir.display())))?;
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(log)
        .map_err(io(format!("cannot write {}", log.display())))?;
    // An older log may have been made with wider permissions.
    use std::os::unix::fs::PermissionsExt;
    let _ = file.set_permissions(std::fs::Permissions::from_mode(0o600));
    Ok(file)
}

/// The id of the image `name` names, if it exists.
fn image_id(podman: &Podman, name: &str) -> Option<String> {
    podman
        .run(["image", "inspect", "--format", "{{.Id}}", name])
        .ok()
        .map(|id| id.trim().to_string())
        .filter(|id| !id.is_empty())
}

/// Removes image `id`, an earlier build of `agent`'s image, when no tag
/// names it any more and it is `agent`'s by its label; a container that
/// still runs it keeps it (podman refuses), until `lazaret image prune`.
fn remove_if_left_over(podman: &Podman, id: &str, agent: &str) {
    let Ok(out) = podman.run([
        "image",
        "inspect",
        "--format",
        "{{len .RepoTags}} {{index .Labels \"lazaret.agent\"}}",
        id,
    ]) else {
        return;
    };
    if out.trim() == format!("0 {agent}") {
        let _ = podman.run(["rmi", id]);
    }
}

/// Labels that mark an image as one Lazaret made: an agent image (and its
/// build stages), a base image, the Network Sidecar's image.
pub const OWN_LABELS: &[&str] = &[
    "lazaret.agent",
    "lazaret.base.digest",
    "lazaret.sidecar.sha256",
];

/// One row of `lazaret image list`.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct ImageRow {
    #[serde(rename = "Names", default)]
    pub names: Vec<String>,
    #[serde(rename = "Id")]
    pub id: String,
    #[serde(rename = "Created")]
    pub created: i64,
    #[serde(rename = "Size")]
    pub size: u64,
    #[serde(rename = "Labels", default)]
    pub labels: Option<std::collections::BTreeMap<String, String>>,
    /// The names the image had (podman keeps them once it is untagged).
    #[serde(rename = "History", default)]
    pub history: Option<Vec<String>>,
}

impl ImageRow {
    /// The agent a row's image carries, from its label or name.
    pub fn agent(&self) -> Option<String> {
        if let Some(a) = self.labels.as_ref().and_then(|l| l.get("lazaret.agent")) {
            return Some(a.clone());
        }
        self.names
            .iter()
            .find_map(|n| agent_of_image(n).map(str::to_string))
    }

    /// An image no tag names any more (a previous build, a build stage):
    /// only Lazaret's are listed ([`OWN_LABELS`]).
    pub fn dangling(&self) -> bool {
        self.names.is_empty()
    }

    /// The last name an untagged image had, if podman kept it.
    pub fn was(&self) -> Option<&str> {
        self.history.as_ref()?.first().map(String::as_str)
    }

    /// The repository an image is in; for an untagged image of Lazaret's,
    /// the one it belonged to by its labels (agent, sidecar, else the
    /// base's release).
    pub fn repository(&self) -> Option<String> {
        if let Some(n) = self.names.first() {
            return Some(
                n.rsplit_once(':')
                    .map_or(n.as_str(), |(r, _)| r)
                    .to_string(),
            );
        }
        let labels = self.labels.as_ref()?;
        if let Some(agent) = labels.get("lazaret.agent") {
            return Some(format!("{AGENT_REPOSITORY}{agent}"));
        }
        if labels.contains_key("lazaret.sidecar.sha256") {
            return Some(SIDECAR_REPOSITORY.to_string());
        }
        labels
            .get("lazaret.base.release")
            .map(|r| format!("{BASE_REPOSITORY}/{r}"))
    }

    /// The version tag of an agent image (the tag that is not `latest`).
    pub fn version(&self) -> Option<String> {
        self.names
            .iter()
            .filter(|n| n.starts_with(AGENT_REPOSITORY))
            .filter_map(|n| n.rsplit_once(':').map(|(_, t)| t))
            .find(|t| *t != "latest" && *t != "build")
            .map(str::to_string)
    }
}

/// Lazaret's images in the user's storage (base, agent, sidecar), then
/// the untagged ones Lazaret left (by [`OWN_LABELS`]; never the user's).
pub fn list_images(podman: &Podman) -> Result<Vec<ImageRow>, ImageError> {
    let read = |filter: &str| -> Result<Vec<ImageRow>, ImageError> {
        let out = podman.run(["images", "--format", "json", "--filter", filter])?;
        serde_json::from_str(&out).map_err(|e| ImageError::Io {
            what: "cannot read `podman images` output".into(),
            error: std::io::Error::other(e),
        })
    };
    let mut rows = read(&format!("reference={BASE_REPOSITORY}/*"))?;
    rows.extend(read("dangling=true")?.into_iter().filter(|r| {
        r.names.is_empty()
            && r.labels
                .as_ref()
                .is_some_and(|l| OWN_LABELS.iter().any(|k| l.contains_key(*k)))
    }));
    // podman lists an image once per tag: one row per image.
    let mut seen = std::collections::HashSet::new();
    rows.retain(|r| seen.insert(r.id.clone()));
    Ok(rows)
}

/// Today's date as YYYYMMDD (UTC), for image tags.
fn podman_date() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    // Civil-from-days (Howard Hinnant's algorithm), to avoid a date crate.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}{m:02}{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_names() {
        assert!(valid_package("git"));
        assert!(valid_package("g++"));
        assert!(valid_package("libc6.1-dev"));
        assert!(!valid_package("a"));
        assert!(!valid_package("git;rm"));
        assert!(!valid_package("-x"));
        assert!(!valid_package("Git"));
    }

    #[test]
    fn recipe_digests_tell_agents_apart() {
        let claude = agent_recipe_digest("claude").unwrap();
        assert_eq!(claude.len(), 16);
        assert_eq!(agent_recipe_digest("claude").unwrap(), claude);
        assert_ne!(agent_recipe_digest("codex").unwrap(), claude);
        assert!(agent_recipe_digest("nope").is_none());
    }

    #[test]
    fn recipes_pin_a_node_the_agents_accept() {
        // Claude Code's package asks for Node.js >= 22 (its `engines`).
        for name in ["claude", "codex"] {
            let recipe = agent_recipe(name).unwrap().containerfile;
            let pinned = recipe
                .lines()
                .find_map(|l| l.strip_prefix("ARG NODE_VERSION="))
                .unwrap_or_else(|| panic!("{name}: no pinned Node.js"));
            let major: u32 = pinned.split('.').next().unwrap().parse().unwrap();
            assert!(major >= 22, "{name}: Node.js {pinned}");
            assert_eq!(
                pinned.split('.').count(),
                3,
                "{name}: {pinned} is not exact"
            );
        }
    }

    #[test]
    fn build_steps_are_the_step_and_commit_lines() {
        let step = |l: &str| build_step(l, 40);
        assert_eq!(
            step("[1/2] STEP 2/5: RUN  apt-get   update").as_deref(),
            Some("[1/2] STEP 2/5: RUN apt-get update")
        );
        assert_eq!(
            step("STEP 1/3: FROM x").as_deref(),
            Some("STEP 1/3: FROM x")
        );
        assert_eq!(
            step("[2/2] COMMIT localhost/lazaret/agent-claude:build").as_deref(),
            Some("COMMIT localhost/lazaret/agent-claude:build: writing the image")
        );
        let long = step(&format!("STEP 2/5: RUN {}", "x".repeat(80))).unwrap();
        assert_eq!(long.chars().count(), 40);
        assert!(long.ends_with('…'));
        for noise in [
            "--> 3bc35f1d2b2",
            "Get:1 http://deb.debian.org/debian trixie InRelease",
            "STEP one: no number",
            "[1/2] noise",
            "added 3 packages in 4s",
        ] {
            assert_eq!(step(noise), None, "{noise}");
        }
    }

    #[test]
    fn date_is_eight_digits() {
        let d = podman_date();
        assert_eq!(d.len(), 8);
        assert!(d.starts_with("20"));
    }
}

/// One tag of a local image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalImage {
    /// `repository:tag`.
    pub name: String,
    pub id: String,
}

/// The tags `image prune` removes: Lazaret's (`localhost/lazaret/...`, or
/// only `repositories` when given) whose image no profile, container or the
/// current sidecar uses. `in_use` holds image ids.
pub fn prune_candidates(
    images: &[LocalImage],
    in_use: &[String],
    repositories: &[String],
) -> Vec<LocalImage> {
    let ours = |name: &str| {
        let repo = name.rsplit_once(':').map_or(name, |(r, _)| r);
        if repositories.is_empty() {
            repo.starts_with(&format!("{BASE_REPOSITORY}/"))
        } else {
            repositories.iter().any(|r| r == repo)
        }
    };
    images
        .iter()
        .filter(|i| ours(&i.name))
        .filter(|i| {
            !in_use
                .iter()
                .any(|u| i.id.starts_with(u) || u.starts_with(&i.id))
        })
        .cloned()
        .collect()
}

/// Every tagged local image.
pub fn local_images(podman: &Podman) -> Result<Vec<LocalImage>, PodmanError> {
    let out = podman.run([
        "images",
        "--no-trunc",
        "--format",
        "{{.Repository}}:{{.Tag}}\t{{.ID}}",
    ])?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .filter(|(n, _)| !n.contains("<none>"))
        .map(|(n, id)| LocalImage {
            name: n.to_string(),
            id: id.trim_start_matches("sha256:").to_string(),
        })
        .collect())
}

/// Ids of `names` (missing ones are skipped) and of every container's image.
pub fn images_in_use(podman: &Podman, names: &[String]) -> Result<Vec<String>, PodmanError> {
    let mut ids: Vec<String> = Vec::new();
    for n in names {
        if let Ok(id) = podman.run(["image", "inspect", "--format", "{{.Id}}", n]) {
            ids.push(id.trim().trim_start_matches("sha256:").to_string());
        }
    }
    let out = podman.run(["ps", "-a", "--no-trunc", "--format", "{{.ImageID}}"])?;
    ids.extend(
        out.lines()
            .filter(|l| !l.is_empty())
            .map(|l| l.trim_start_matches("sha256:").to_string()),
    );
    Ok(ids)
}

#[cfg(test)]
mod prune_tests {
    use super::*;

    #[test]
    fn prune_keeps_images_in_use_and_foreign_ones() {
        let img = |n: &str, id: &str| LocalImage {
            name: n.into(),
            id: id.into(),
        };
        let images = [
            img("localhost/lazaret/trixie:latest", "aaa1"),
            img("localhost/lazaret/trixie:20260101-x", "aaa1"),
            img("localhost/lazaret/trixie:20250101-y", "bbb2"),
            img("localhost/lazaret/sidecar:123", "ccc3"),
            img("docker.io/library/debian:12", "ddd4"),
        ];
        let names: Vec<String> = prune_candidates(&images, &["aaa1".into()], &[])
            .into_iter()
            .map(|i| i.name)
            .collect();
        assert_eq!(
            names,
            [
                "localhost/lazaret/trixie:20250101-y",
                "localhost/lazaret/sidecar:123"
            ]
        );
        let only: Vec<String> =
            prune_candidates(&images, &[], &["localhost/lazaret/sidecar".into()])
                .into_iter()
                .map(|i| i.name)
                .collect();
        assert_eq!(only, ["localhost/lazaret/sidecar:123"]);
    }
}
