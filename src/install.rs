//! Where Lazaret's own helper binaries live on the host.

use std::path::{Path, PathBuf};

/// The static binaries Lazaret puts into containers.
pub const SIDECAR_BINARY: &str = "lazaret-sidecar";
pub const ESCALATE_BINARY: &str = "lazaret-escalate";

/// Folders searched for helper binaries, in order: `$LAZARET_LIBEXEC_DIR`,
/// the folder of the running `lazaret`, then the install locations of
/// `scripts/setup`.
pub fn helper_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    // Absolute only: an empty or relative value would search the current
    // folder, which may be the agent's workspace.
    if let Some(d) = std::env::var_os("LAZARET_LIBEXEC_DIR").map(PathBuf::from)
        && d.is_absolute()
    {
        dirs.push(d);
    }
    if let Some(d) = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
    {
        dirs.push(d);
    }
    dirs.push(PathBuf::from("/usr/local/lib/lazaret"));
    dirs.push(PathBuf::from("/usr/lib/lazaret"));
    dirs
}

/// The first static executable called `name` in [`helper_dirs`]. The
/// helpers run in containers without a dynamic loader, so a dynamically
/// linked build (e.g. `target/release/lazaret-sidecar` beside a
/// `cargo build` of lazaret) is passed over: it could not start there.
pub fn find_helper(name: &str) -> Option<PathBuf> {
    helper_dirs()
        .into_iter()
        .map(|d| d.join(name))
        .find(|p| is_executable(p) && is_static_elf(p))
}

/// Helpers called `name` that [`find_helper`] passes over because they
/// are dynamically linked (for `doctor`).
pub fn dynamic_helpers(name: &str) -> Vec<PathBuf> {
    helper_dirs()
        .into_iter()
        .map(|d| d.join(name))
        .filter(|p| is_executable(p) && !is_static_elf(p))
        .collect()
}

/// An ELF file without a program interpreter (`PT_INTERP`): it needs no
/// dynamic loader, so it runs alone in an otherwise empty image.
pub fn is_static_elf(path: &Path) -> bool {
    use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
    let Ok(data) = std::fs::read(path) else {
        return false;
    };
    let Ok(elf) = ElfFile64::<object::Endianness>::parse(data.as_slice()) else {
        return false;
    };
    let endian = elf.endian();
    match elf.elf_header().program_headers(endian, data.as_slice()) {
        Ok(headers) => !headers
            .iter()
            .any(|h| h.p_type(endian) == object::elf::PT_INTERP),
        Err(_) => false,
    }
}

/// `true` when the escalation binary at `path` holds each session's
/// command back until the sandbox passed its self-test (its `--version`
/// names [`lazaret_escalate::SESSION_GATE`]); an older build does not.
pub fn has_session_gate(path: &Path) -> bool {
    std::process::Command::new(path)
        .arg("--version")
        .output()
        .is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .any(|w| w == lazaret_escalate::SESSION_GATE)
        })
}

/// Looks `name` up on `$PATH`, like a shell would.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 executable whose program headers are `types`.
    fn elf_with(types: &[u32]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
        b.extend_from_slice(&62u16.to_le_bytes()); // x86-64
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&0x40_0000u64.to_le_bytes()); // entry
        b.extend_from_slice(&64u64.to_le_bytes()); // program headers follow
        b.extend_from_slice(&0u64.to_le_bytes()); // no section headers
        b.extend_from_slice(&0u32.to_le_bytes());
        for v in [64u16, 56, types.len() as u16, 64, 0, 0] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for &t in types {
            b.extend_from_slice(&t.to_le_bytes());
            b.extend_from_slice(&5u32.to_le_bytes()); // R+X
            for v in [0u64, 0x40_0000, 0x40_0000, 0, 0, 0x1000] {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
        b
    }

    #[test]
    fn an_executable_without_an_interpreter_is_static() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, bytes: Vec<u8>| {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            p
        };
        let load = object::elf::PT_LOAD;
        let interp = object::elf::PT_INTERP;
        assert!(is_static_elf(&write("static", elf_with(&[load]))));
        // The same file with an interpreter header is not.
        assert!(!is_static_elf(&write("dynamic", elf_with(&[interp, load]))));
        let mut cut = elf_with(&[load]);
        cut.truncate(70);
        assert!(!is_static_elf(&write("truncated", cut)));
    }

    #[test]
    fn dynamic_executables_are_not_static() {
        // The test binary itself is dynamically linked (the default target).
        let me = std::env::current_exe().unwrap();
        assert!(!is_static_elf(&me), "{}", me.display());
        assert!(!is_static_elf(Path::new("/etc/passwd")));
        assert!(!is_static_elf(Path::new("/no/such/file")));
    }
}
