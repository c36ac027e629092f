//! Reading configuration files into one merged TOML tree, remembering where
//! every value came from.
//!
//! Each file is parsed and type-checked on its own, so a syntax error, an
//! unknown key or a wrong type is reported with that file's line and column
//! (every unknown key and wrong type of the file in one message).
//! The files are then merged per key: tables merge recursively, anything else
//! (strings, booleans, arrays) is replaced whole by the higher layer.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::schema::Schema;
use super::{ConfigError, Problem};

/// The built-in defaults, compiled in.
pub const DEFAULT_TOML: &str = include_str!("../../assets/default.toml");
/// How messages and `config show` name the built-in defaults.
pub const DEFAULT_NAME: &str = "<built-in defaults>";

/// Where a configuration file sits in the hierarchy (spec §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Layer {
    /// Built into the binary (`assets/default.toml`); always trusted.
    Default,
    /// `~/.config/lazaret/config.toml`
    User,
    /// `./lazaret.toml`
    Workspace,
    /// `--config FILE`
    CommandLine,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Default => "default",
            Layer::User => "user",
            Layer::Workspace => "workspace",
            Layer::CommandLine => "--config",
        })
    }
}

/// A position in a configuration file, 1-based like an editor shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file.display(), self.line, self.column)
    }
}

impl Location {
    fn at(file: &Path, text: &str, offset: usize) -> Self {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &text[..offset];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        Location {
            file: file.to_path_buf(),
            line,
            column,
        }
    }
}

/// One configuration file that was found and read.
#[derive(Debug, Clone)]
pub struct SourceFile {
    pub layer: Layer,
    pub path: PathBuf,
}

/// The merged tree plus, for every key path, the place that set it.
///
/// Key paths look like `profiles.claude.volumes[1].mode`.
#[derive(Debug, Default, Clone)]
pub struct Merged {
    pub table: toml::Table,
    pub origins: BTreeMap<String, Location>,
    pub sources: Vec<SourceFile>,
}

impl Merged {
    /// Where `path` was set, if any file set it.
    pub fn origin(&self, path: &str) -> Option<&Location> {
        self.origins.get(path)
    }

    /// Parses, type-checks and merges one more file over what is there.
    pub fn add_file(&mut self, layer: Layer, path: &Path) -> Result<(), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_path_buf(),
            error,
        })?;
        self.add_text(layer, path, &text)
    }

    /// Like [`Merged::add_file`], for text already in memory (`path` names it
    /// in messages).
    pub fn add_text(&mut self, layer: Layer, path: &Path, text: &str) -> Result<(), ConfigError> {
        let located = |err: toml::de::Error| ConfigError::Syntax {
            location: Location::at(path, text, err.span().map_or(0, |s| s.start)),
            message: err.message().trim_end().to_string(),
        };
        let parsed = DeTable::parse(text).map_err(located)?;
        // Type-check this file alone: unknown keys and wrong types point here.
        let mut problems = schema_problems(&parsed);
        if problems.len() == 1 {
            let (err, _) = problems.remove(0);
            return Err(located(err));
        }
        if !problems.is_empty() {
            return Err(ConfigError::Invalid(
                problems
                    .into_iter()
                    .map(|(err, key)| Problem {
                        location: Some(Location::at(path, text, err.span().map_or(0, |s| s.start))),
                        key: key.unwrap_or_default(),
                        message: err.message().trim_end().to_string(),
                        security: false,
                    })
                    .collect(),
            ));
        }

        let mut origins = BTreeMap::new();
        let table = convert_table(parsed.get_ref(), "", path, text, &mut origins);
        merge_table(&mut self.table, table, "", &mut self.origins, &origins);
        self.sources.push(SourceFile {
            layer,
            path: path.to_path_buf(),
        });
        Ok(())
    }

    /// A tree holding only the built-in defaults (the `default` layer), so
    /// Lazaret works with no configuration file; every file read after it
    /// overrides it per key.
    pub fn with_defaults() -> Self {
        let mut merged = Merged::default();
        merged
            .add_text(Layer::Default, Path::new(DEFAULT_NAME), DEFAULT_TOML)
            .expect("the built-in defaults (assets/default.toml) are valid");
        merged
    }

    /// The typed view of the merged tree.
    pub fn schema(&self) -> Result<Schema, ConfigError> {
        // Every layer passed the same type check and merging only replaces
        // whole values, so this cannot fail; report rather than panic if it does.
        Schema::deserialize(toml::Value::Table(self.table.clone())).map_err(|err| {
            ConfigError::Merge {
                message: err.message().to_string(),
            }
        })
    }
}

/// Every schema error of one file, each with the key path it is about.
///
/// serde stops at the first error, so each one found takes its entry out of
/// a copy and the check runs again: two typos are reported in one run.
fn schema_problems(parsed: &Spanned<DeTable<'_>>) -> Vec<(toml::de::Error, Option<String>)> {
    let mut rest = parsed.clone();
    let mut problems = Vec::new();
    // Every round removes one entry, so this ends; the bound is a backstop.
    for _ in 0..64 {
        let Err(err) = Schema::deserialize(toml::de::Deserializer::from(rest.clone())) else {
            break;
        };
        let key = err
            .span()
            .and_then(|span| take_entry(rest.get_mut(), &span, ""));
        let stuck = key.is_none();
        problems.push((err, key));
        if stuck {
            break;
        }
    }
    problems
}

/// Removes from `table` the deepest entry whose key or value holds `span`,
/// returning its key path.
fn take_entry(table: &mut DeTable<'_>, span: &Range<usize>, prefix: &str) -> Option<String> {
    let holds = |outer: Range<usize>| outer.start <= span.start && span.end <= outer.end;
    let mut hit = None;
    for (key, value) in table.iter_mut() {
        let path = child_path(prefix, key.get_ref());
        if let Some(inner) = take_within(value.get_mut(), span, &path) {
            return Some(inner);
        }
        if hit.is_none() && (holds(key.span()) || holds(value.span())) {
            hit = Some((key.clone(), path));
        }
    }
    let (key, path) = hit?;
    table.remove(&key);
    Some(path)
}

fn take_within(value: &mut DeValue<'_>, span: &Range<usize>, path: &str) -> Option<String> {
    match value {
        DeValue::Table(t) => take_entry(t, span, path),
        DeValue::Array(items) => items
            .iter_mut()
            .enumerate()
            .find_map(|(i, item)| take_within(item.get_mut(), span, &format!("{path}[{i}]"))),
        _ => None,
    }
}

fn child_path(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

fn convert_table(
    table: &DeTable<'_>,
    prefix: &str,
    file: &Path,
    text: &str,
    origins: &mut BTreeMap<String, Location>,
) -> toml::Table {
    let mut out = toml::Table::new();
    for (key, value) in table {
        let path = child_path(prefix, key.get_ref());
        // Tables are located at their key, values at the value itself.
        let span = if value.get_ref().is_table() {
            key.span()
        } else {
            value.span()
        };
        origins.insert(path.clone(), Location::at(file, text, span.start));
        let converted = convert_value(value.get_ref(), &path, file, text, origins);
        out.insert(key.get_ref().to_string(), converted);
    }
    out
}

fn convert_value(
    value: &DeValue<'_>,
    path: &str,
    file: &Path,
    text: &str,
    origins: &mut BTreeMap<String, Location>,
) -> toml::Value {
    match value {
        DeValue::String(s) => toml::Value::String(s.to_string()),
        DeValue::Boolean(b) => toml::Value::Boolean(*b),
        // The schema has no numbers; keep them faithfully anyway for `show`.
        DeValue::Integer(i) => i64::from_str_radix(&i.as_str().replace('_', ""), i.radix())
            .map_or_else(
                |_| toml::Value::String(i.as_str().to_string()),
                toml::Value::Integer,
            ),
        DeValue::Float(f) => f.as_str().replace('_', "").parse().map_or_else(
            |_| toml::Value::String(f.as_str().to_string()),
            toml::Value::Float,
        ),
        DeValue::Datetime(d) => toml::Value::Datetime(*d),
        DeValue::Array(items) => toml::Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    let item_path = format!("{path}[{i}]");
                    origins.insert(
                        item_path.clone(),
                        Location::at(file, text, item.span().start),
                    );
                    convert_value(item.get_ref(), &item_path, file, text, origins)
                })
                .collect(),
        ),
        DeValue::Table(t) => toml::Value::Table(convert_table(t, path, file, text, origins)),
    }
}

/// Merges `upper` into `lower`: tables per key, everything else replaced.
fn merge_table(
    lower: &mut toml::Table,
    upper: toml::Table,
    prefix: &str,
    origins: &mut BTreeMap<String, Location>,
    upper_origins: &BTreeMap<String, Location>,
) {
    for (key, value) in upper {
        let path = child_path(prefix, &key);
        match (lower.get_mut(&key), value) {
            (Some(toml::Value::Table(low)), toml::Value::Table(up)) => {
                merge_table(low, up, &path, origins, upper_origins);
            }
            (_, value) => {
                // A replaced value takes all its nested origins from the upper file.
                origins.retain(|p, _| !is_within(p, &path));
                for (p, loc) in upper_origins.iter().filter(|(p, _)| is_within(p, &path)) {
                    origins.insert(p.clone(), loc.clone());
                }
                lower.insert(key, value);
            }
        }
        if let Some(loc) = upper_origins.get(&path) {
            origins.entry(path).or_insert_with(|| loc.clone());
        }
    }
}

/// True when `path` is `root` or lies below it.
fn is_within(path: &str, root: &str) -> bool {
    path.strip_prefix(root)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
}
