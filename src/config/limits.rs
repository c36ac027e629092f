//! A profile's resource limits as configured (`limits = { memory, cpus,
//! pids, tmp }`): parsing and validation. How the engine applies them, and
//! the watchdog that holds them where the host cannot, live in
//! `engine::limits`.

use serde::{Deserialize, Serialize};

pub(crate) const KIB: u64 = 1024;
pub(crate) const MIB: u64 = 1024 * KIB;
pub(crate) const GIB: u64 = 1024 * MIB;

/// Defaults: generous for a build, far below what takes a workstation down.
pub const DEFAULT_MEMORY: u64 = 4 * GIB;
pub const DEFAULT_PIDS: u32 = 1024;
/// The smallest limits that still start a sandbox and a shell.
const MIN_MEMORY: u64 = 64 * MIB;
const MIN_PIDS: u32 = 16;

/// One profile's limits, validated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Bytes of resident memory of the whole sandbox.
    pub memory: u64,
    /// CPUs (fractions allowed); `None`: no limit.
    pub cpus: Option<f64>,
    /// Processes (and threads, under cgroups) in the sandbox.
    pub pids: u32,
    /// Bytes of the tmpfs at `/tmp`.
    pub tmp: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory: DEFAULT_MEMORY,
            cpus: None,
            pids: DEFAULT_PIDS,
            tmp: DEFAULT_MEMORY / 2,
        }
    }
}

/// `limits = { memory = "2GiB", cpus = 2, pids = 512, tmp = "512MiB" }` as
/// written in a configuration file.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSchema {
    pub memory: Option<Size>,
    pub cpus: Option<Number>,
    pub pids: Option<i64>,
    pub tmp: Option<Size>,
}

/// A size: bytes, or a string such as `"512MiB"`, `"2G"`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Size {
    Bytes(i64),
    Text(String),
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Number {
    Int(i64),
    Float(f64),
}

/// Parses `"512MiB"`, `"2G"`, `"1.5GiB"`, `"100k"`, `"4096"` (bytes).
/// K/M/G/T mean powers of 1024 with or without the `i`, as in podman.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim().to_ascii_lowercase();
    let factor = match unit.trim_end_matches('b').trim_end_matches('i') {
        "" => 1,
        "k" => KIB,
        "m" => MIB,
        "g" => GIB,
        "t" => 1024 * GIB,
        _ => {
            return Err(format!(
                "`{text}` has an unknown unit (use B, KiB, MiB, GiB)"
            ));
        }
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{text}` is not a size such as \"512MiB\" or \"2GiB\""))?;
    let bytes = n * factor as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("`{text}` is out of range"));
    }
    Ok(bytes as u64)
}

/// A size for people: `256 MiB`, `4 GiB`, `1.5 GiB`.
pub fn show_size(bytes: u64) -> String {
    let (unit, div) = if bytes >= GIB {
        ("GiB", GIB)
    } else if bytes >= MIB {
        ("MiB", MIB)
    } else {
        ("KiB", KIB)
    };
    let v = bytes as f64 / div as f64;
    if (v - v.round()).abs() < 0.05 {
        format!("{} {unit}", v.round())
    } else {
        format!("{v:.1} {unit}")
    }
}

impl Limits {
    /// Validates a profile's `limits`; each problem comes with its key
    /// (relative to `limits`).
    pub fn from_schema(raw: Option<&LimitsSchema>) -> Result<Limits, Vec<(&'static str, String)>> {
        let mut limits = Limits::default();
        let Some(raw) = raw else {
            return Ok(limits);
        };
        let mut problems = Vec::new();
        let size = |s: &Size| match s {
            Size::Bytes(b) if *b >= 0 => Ok(*b as u64),
            Size::Bytes(b) => Err(format!("{b} is negative")),
            Size::Text(t) => parse_size(t),
        };
        if let Some(m) = &raw.memory {
            match size(m) {
                Ok(b) if b < MIN_MEMORY => problems.push((
                    "memory",
                    format!(
                        "{} is below the smallest sandbox ({})",
                        show_size(b),
                        show_size(MIN_MEMORY)
                    ),
                )),
                Ok(b) => {
                    limits.memory = b;
                    limits.tmp = b / 2;
                }
                Err(e) => problems.push(("memory", e)),
            }
        }
        if let Some(t) = &raw.tmp {
            match size(t) {
                // Under gVisor /tmp's pages are the sandbox's memory.
                Ok(b) if b > limits.memory => problems.push((
                    "tmp",
                    format!(
                        "{} is more than the memory limit ({}); /tmp lives in memory",
                        show_size(b),
                        show_size(limits.memory)
                    ),
                )),
                Ok(b) if b < MIB => problems.push(("tmp", "is below 1 MiB".into())),
                Ok(b) => limits.tmp = b,
                Err(e) => problems.push(("tmp", e)),
            }
        }
        match raw.pids {
            Some(p) if p < i64::from(MIN_PIDS) => problems.push((
                "pids",
                format!("{p} is below {MIN_PIDS}: a shell and git need a few processes"),
            )),
            Some(p) => limits.pids = u32::try_from(p).unwrap_or(u32::MAX),
            None => {}
        }
        match raw.cpus {
            Some(Number::Int(c)) if c > 0 => limits.cpus = Some(c as f64),
            Some(Number::Float(c)) if c > 0.0 && c.is_finite() => limits.cpus = Some(c),
            Some(_) => problems.push(("cpus", "must be a number above 0".into())),
            None => {}
        }
        if problems.is_empty() {
            Ok(limits)
        } else {
            Err(problems)
        }
    }

    /// One line for people: `memory 4 GiB, pids 1024, cpus all, /tmp 2 GiB`.
    pub fn summary(&self) -> String {
        format!(
            "memory {}, pids {}, cpus {}, /tmp {}",
            show_size(self.memory),
            self.pids,
            self.cpus.map_or("unlimited".into(), |c| c.to_string()),
            show_size(self.tmp)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_like_podman() {
        assert_eq!(parse_size("256MiB").unwrap(), 256 * MIB);
        assert_eq!(parse_size("2G").unwrap(), 2 * GIB);
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 * GIB / 2);
        assert_eq!(parse_size("100k").unwrap(), 100 * KIB);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size(" 64 mb ").unwrap(), 64 * MIB);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("5X").is_err());
        assert_eq!(show_size(256 * MIB), "256 MiB");
        assert_eq!(show_size(3 * GIB / 2), "1.5 GiB");
    }

    #[test]
    fn schema_is_validated_with_keys() {
        let raw: LimitsSchema =
            toml::from_str("memory = \"256MiB\"\npids = 64\ncpus = 1.5").unwrap();
        let l = Limits::from_schema(Some(&raw)).unwrap();
        assert_eq!(l.memory, 256 * MIB);
        assert_eq!(l.tmp, 128 * MIB);
        assert_eq!(l.pids, 64);
        assert_eq!(l.cpus, Some(1.5));
        let raw: LimitsSchema = toml::from_str("cpus = 2").unwrap();
        assert_eq!(Limits::from_schema(Some(&raw)).unwrap().cpus, Some(2.0));
        let raw: LimitsSchema =
            toml::from_str("memory = \"1MiB\"\npids = 2\ncpus = 0\ntmp = \"8GiB\"").unwrap();
        let keys: Vec<&str> = Limits::from_schema(Some(&raw))
            .unwrap_err()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(keys, ["memory", "tmp", "pids", "cpus"]);
        assert!(toml::from_str::<LimitsSchema>("swap = 1").is_err());
        assert_eq!(Limits::from_schema(None).unwrap(), Limits::default());
    }
}
