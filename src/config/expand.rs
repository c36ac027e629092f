//! Variable expansion and path sanitation (spec §3.2).
//!
//! A small, strict template language: `~` only as the very first character,
//! and the five tokens of §3.2.2 in braces. Any other brace is an error, so a
//! typo such as `{profile}` cannot silently become a literal path.

use std::fmt;
use std::path::{Component, Path, PathBuf};

/// The expansion tokens of spec §3.2.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Token {
    ProfileName,
    ProfileDir,
    DomainHash,
    DomainDir,
    WorkspaceDir,
}

impl Token {
    pub const ALL: [Token; 5] = [
        Token::ProfileName,
        Token::ProfileDir,
        Token::DomainHash,
        Token::DomainDir,
        Token::WorkspaceDir,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Token::ProfileName => "profile_name",
            Token::ProfileDir => "profile_dir",
            Token::DomainHash => "domain_hash",
            Token::DomainDir => "domain_dir",
            Token::WorkspaceDir => "workspace_dir",
        }
    }

    /// Tokens that name a host directory; meaningless inside the container.
    pub fn is_host_path(self) -> bool {
        matches!(
            self,
            Token::ProfileDir | Token::DomainDir | Token::WorkspaceDir
        )
    }

    fn from_name(name: &str) -> Option<Token> {
        Token::ALL.into_iter().find(|t| t.name() == name)
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{}}}", self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Token(Token),
}

/// A parsed configuration string that may hold `~` and tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    raw: String,
    tilde: bool,
    parts: Vec<Part>,
}

/// Values for the tokens, known once profile and workspace are chosen.
#[derive(Debug, Clone)]
pub struct TokenValues {
    pub profile_name: String,
    pub profile_dir: PathBuf,
    pub domain_hash: String,
    pub domain_dir: PathBuf,
    pub workspace_dir: PathBuf,
}

impl TokenValues {
    fn get(&self, token: Token) -> String {
        match token {
            Token::ProfileName => self.profile_name.clone(),
            Token::DomainHash => self.domain_hash.clone(),
            Token::ProfileDir => self.profile_dir.display().to_string(),
            Token::DomainDir => self.domain_dir.display().to_string(),
            Token::WorkspaceDir => self.workspace_dir.display().to_string(),
        }
    }
}

impl Template {
    /// Parses `raw`. Fails on unknown tokens, stray braces, NUL characters and
    /// `~user` forms.
    pub fn parse(raw: &str) -> Result<Template, String> {
        if raw.contains('\0') {
            return Err("contains a NUL character".into());
        }
        let (tilde, rest) = match raw.strip_prefix('~') {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => (true, rest),
            Some(_) => {
                return Err(format!(
                    "`{raw}`: only `~` and `~/...` are expanded; write the full path for other users' homes"
                ));
            }
            None => (false, raw),
        };
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut i = 0;
        while let Some(c) = rest[i..].chars().next() {
            match c {
                '{' => {
                    let Some(len) = rest[i + 1..].find('}') else {
                        return Err(format!(
                            "`{raw}`: `{{` without a closing `}}`; braces are reserved for tokens"
                        ));
                    };
                    let name = &rest[i + 1..i + 1 + len];
                    let token = Token::from_name(name).ok_or_else(|| {
                        let known: Vec<String> = Token::ALL.iter().map(|t| t.to_string()).collect();
                        format!(
                            "`{raw}`: unknown token `{{{name}}}`; known tokens are {}",
                            known.join(", ")
                        )
                    })?;
                    if !literal.is_empty() {
                        parts.push(Part::Literal(std::mem::take(&mut literal)));
                    }
                    parts.push(Part::Token(token));
                    i += len + 2;
                }
                '}' => {
                    return Err(format!(
                        "`{raw}`: `}}` without an opening `{{`; braces are reserved for tokens"
                    ));
                }
                c => {
                    literal.push(c);
                    i += c.len_utf8();
                }
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        Ok(Template {
            raw: raw.to_string(),
            tilde,
            parts,
        })
    }

    pub fn raw(&self) -> &str {
        &self.raw
    }

    pub fn has_tilde(&self) -> bool {
        self.tilde
    }

    pub fn tokens(&self) -> impl Iterator<Item = Token> + '_ {
        self.parts.iter().filter_map(|p| match p {
            Part::Token(t) => Some(*t),
            Part::Literal(_) => None,
        })
    }

    /// Expands tilde and tokens, then applies the `..` check of §3.2.3.
    ///
    /// `values` may be `None` for strings that must not use tokens; `home` is
    /// asked only when the template starts with `~`.
    pub fn expand(
        &self,
        values: Option<&TokenValues>,
        home: &dyn Fn() -> Option<PathBuf>,
    ) -> Result<PathBuf, ExpandError> {
        let mut out = String::new();
        if self.tilde {
            let home = home().ok_or(ExpandError::NoHome)?;
            out.push_str(&home.display().to_string());
        }
        for part in &self.parts {
            match part {
                Part::Literal(s) => out.push_str(s),
                Part::Token(t) => match values {
                    Some(v) => out.push_str(&v.get(*t)),
                    None => return Err(ExpandError::TokenNotAllowed(*t)),
                },
            }
        }
        let path = PathBuf::from(out);
        reject_dot_dot(&path)?;
        Ok(path)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    #[error(
        "security: `{0}` contains a `..` segment after expansion; Lazaret refuses paths that climb out of their folder"
    )]
    DotDot(PathBuf),
    #[error("`~` cannot be expanded: $HOME is unset and this user has no passwd entry")]
    NoHome,
    #[error("the token {0} cannot be used here")]
    TokenNotAllowed(Token),
}

/// Spec §3.2.3 (2): any `..` segment is a security error.
pub fn reject_dot_dot(path: &Path) -> Result<(), ExpandError> {
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(ExpandError::DotDot(path.to_path_buf()));
    }
    Ok(())
}

/// Canonicalises `path`, which need not exist yet: the longest existing
/// ancestor is resolved (symlinks included) and the rest appended.
pub fn canonicalize_lenient(path: &Path) -> std::io::Result<PathBuf> {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        match existing.canonicalize() {
            Ok(mut canonical) => {
                for part in rest.iter().rev() {
                    canonical.push(part);
                }
                return Ok(canonical);
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                match (existing.file_name(), existing.parent()) {
                    (Some(name), Some(parent)) => {
                        rest.push(name.to_os_string());
                        existing = parent.to_path_buf();
                    }
                    _ => return Err(err),
                }
            }
            Err(err) => return Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home() -> Option<PathBuf> {
        Some(PathBuf::from("/home/dev"))
    }

    #[test]
    fn tilde_only_at_start() {
        let t = Template::parse("~/x").unwrap();
        assert_eq!(t.expand(None, &home).unwrap(), PathBuf::from("/home/dev/x"));
        let t = Template::parse("/a/~/b").unwrap();
        assert_eq!(t.expand(None, &home).unwrap(), PathBuf::from("/a/~/b"));
        assert!(Template::parse("~root/x").is_err());
    }

    #[test]
    fn braces_must_be_tokens() {
        assert!(Template::parse("/a/{profile}").is_err());
        assert!(Template::parse("/a/{profile_name").is_err());
        assert!(Template::parse("/a/profile_name}").is_err());
        let t = Template::parse("{profile_dir}/x-{profile_name}").unwrap();
        assert_eq!(
            t.tokens().collect::<Vec<_>>(),
            vec![Token::ProfileDir, Token::ProfileName]
        );
    }

    #[test]
    fn lenient_canonicalisation_keeps_missing_tail() {
        let dir = std::env::temp_dir().canonicalize().unwrap();
        let p = dir.join("lazaret-surely-missing-9f3/a/b");
        assert_eq!(canonicalize_lenient(&p).unwrap(), p);
    }
}
