//! The layers of `src/` (docs/architecture.md, "Layers of `src/`"): each
//! top-level module of the library imports only modules below it, so the
//! import graph has no circle, and nothing below `client` uses the
//! terminal UI's crates. A drawing that only reviewers check erodes one
//! convenient import at a time; this test keeps it true.
//!
//! It reads `src/` with `syn` and resolves names the way the compiler does,
//! so no spelling of an import walks around it: the module tree is followed
//! from `src/lib.rs` (`mod` declarations, `mod.rs`, `#[path]`, inline
//! `mod` blocks), and `crate::`, `super::` and `self::` chains, `use` trees
//! (groups, renames, globs, re-exports at the crate root), `::lazaret::`,
//! and paths in code, types, patterns, attributes, macro invocations and
//! doc links all count. `src/main.rs` is the binary on top of everything
//! and is not checked.
//!
//! The checker is tested on small synthetic trees too: one per form of
//! import it must catch, and ones it must let pass.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::sync::OnceLock;

use proc_macro2::{Spacing, Span, TokenStream, TokenTree};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::visit::{self, Visit};

// ---------------------------------------------------------------- the rules

/// The layers of docs/architecture.md, top to bottom: a module may import
/// only modules of later entries.
const LAYERS: &[&[&str]] = &[
    &["cli"],
    &["ui"],
    &["client"],
    &["doctor", "coordinator"],
    &["domains"],
    &["engine"],
    &["git_sentry", "net", "mounts", "checkpoint"],
    &["config"],
    BOTTOM,
];

/// The bottom layer, whose modules have "no crate:: imports but each
/// other's" (docs/architecture.md).
const BOTTOM: &[&str] = &["domain", "agents", "podman", "rundir", "host", "install"];

/// Imports the code makes between two modules the drawing puts side by
/// side in one layer (one way each; the other way would be a circle). Each
/// entry is a difference from docs/architecture.md, kept so the rest of
/// the drawing can be enforced; a test fails when an entry is no longer
/// used.
const SIDEWAYS: &[(&str, &str)] = &[
    // src/doctor.rs: the doctor probes confinement of approved commands.
    ("doctor", "coordinator"),
    // src/git_sentry/{mod,review}.rs: the workspace mount and the masks.
    ("git_sentry", "mounts"),
];

/// The modules that may use the terminal UI's crates; all below is the core.
const TERMINAL_UI_MODULES: &[&str] = &["cli", "ui", "client"];

/// Crates the core may not name at all, with their family (`ratatui_core`).
const TERMINAL_CRATES: &[&str] = &["ratatui", "crossterm"];

/// The widgets crate, of which the core may use only the module that
/// draws nothing: hostile text made visible before a human reads it.
const WIDGETS: &str = "lazaret_widgets";
const WIDGETS_FOR_THE_CORE: &str = "visible";

/// The crate's own name: `::lazaret::x` or `lazaret::x` inside `src/`
/// names this crate (with `extern crate self as lazaret`).
const CRATE_NAME: &str = "lazaret";

const RULE: &str = "docs/architecture.md, \"Layers of `src/`\"";

fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// The drawing as one line, for messages.
fn drawing() -> String {
    let layers: Vec<String> = LAYERS
        .iter()
        .map(|l| {
            if *l == BOTTOM {
                format!("{} (each other's)", l.join(" · "))
            } else {
                l.join(", ")
            }
        })
        .collect();
    layers.join(" > ")
}

/// Why `from` may not import `to`, if it may not. Both are in LAYERS.
fn layer_rule(from: &str, to: &str) -> Option<String> {
    let (f, t) = (layer(from)?, layer(to)?);
    let both_bottom = BOTTOM.contains(&from) && BOTTOM.contains(&to);
    if from == to || t > f || both_bottom || SIDEWAYS.contains(&(from, to)) {
        return None;
    }
    Some(if t == f {
        format!(
            "`{from}` and `{to}` sit side by side in one layer and may not import each other; \
             move what both need into a module below them"
        )
    } else {
        format!(
            "`{to}` sits above `{from}`; move what `{from}` needs into `{from}` or a module \
             below it, or let `{to}` pass it in"
        )
    })
}

/// Why module `from` may not use the extern path `path`, if it may not.
fn terminal_ui_rule(from: &str, path: &[String], glob: bool) -> Option<String> {
    if TERMINAL_UI_MODULES.contains(&from) {
        return None;
    }
    let krate = path.first()?.as_str();
    let terminal = TERMINAL_CRATES
        .iter()
        .any(|c| krate == *c || krate.starts_with(&format!("{c}_")));
    let banned = if terminal {
        krate.to_string()
    } else if krate == WIDGETS {
        match path.get(1) {
            Some(m) if m != WIDGETS_FOR_THE_CORE => format!("{WIDGETS}::{m}"),
            None if glob => format!("all of {WIDGETS}"),
            _ => return None,
        }
    } else {
        return None;
    };
    Some(format!(
        "`{from}` is below `client`, part of the core, and may not use {banned}. \
         Rule ({RULE}; src/lib.rs): no ratatui or crossterm anywhere below client, the core \
         knows nothing of the terminal UI. Fix: return plain data and draw it in ui or client; \
         of {WIDGETS} the core may use only `{WIDGETS}::{WIDGETS_FOR_THE_CORE}`, which draws nothing"
    ))
}

// ------------------------------------------------------------ the findings

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Rule {
    /// The module tree could not be read as the compiler would.
    Tree,
    /// A top-level module with no place in LAYERS.
    Placement,
    Layer,
    TerminalUi,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Finding {
    rule: Rule,
    file: String,
    line: usize,
    message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

fn report(findings: &[Finding]) -> String {
    let lines: Vec<String> = findings.iter().map(|f| format!("  {f}")).collect();
    lines.join("\n")
}

// --------------------------------------------------------- the module tree

/// One parsed file of the library and the module it is.
struct SourceFile {
    path: String,
    module: Vec<String>,
    ast: syn::File,
}

/// What a module's namespace holds, as far as paths through it go.
#[derive(Default)]
struct Scope {
    children: BTreeSet<String>,
    /// `use` and `extern crate` names (a `use` inside a function counts
    /// for the whole module: wider than the compiler, never narrower).
    names: BTreeMap<String, Vec<Binding>>,
    globs: Vec<Binding>,
}

/// A path in a `use`, with the module it was written in.
#[derive(Clone)]
struct Binding {
    ctx: Vec<String>,
    segs: Vec<String>,
    leading_colon: bool,
}

struct Tree {
    files: Vec<SourceFile>,
    scopes: BTreeMap<Vec<String>, Scope>,
    /// The top-level modules, with where they are declared.
    top_level: BTreeMap<String, (String, usize)>,
    /// Names of this crate's root besides `crate`.
    crate_names: BTreeSet<String>,
    /// `macro_rules!` macros by name: where each is defined.
    macros: BTreeMap<String, Vec<MacroDef>>,
    /// What the macros defined at the crate root name: the root is in no
    /// layer, so a module calling one imports what it expands to.
    root_macros: BTreeMap<String, BTreeSet<Target>>,
    problems: Vec<Finding>,
}

struct MacroDef {
    ctx: Vec<String>,
    /// `#[macro_export]`: reachable as `crate::name!` from anywhere.
    exported: bool,
}

fn line(span: Span) -> usize {
    span.start().line
}

fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            _ => parts.push(part),
        }
    }
    parts.join("/")
}

fn string_value(expr: &syn::Expr) -> Option<String> {
    match expr {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(s),
            ..
        }) => Some(s.value()),
        _ => None,
    }
}

/// Reads the library as the compiler does: from `src/lib.rs` along its
/// `mod` declarations. `sources` maps paths like `src/ui/app.rs` to text.
fn load(sources: &BTreeMap<String, String>) -> Tree {
    let mut tree = Tree {
        files: Vec::new(),
        scopes: BTreeMap::new(),
        top_level: BTreeMap::new(),
        crate_names: BTreeSet::from([CRATE_NAME.to_string()]),
        macros: BTreeMap::new(),
        root_macros: BTreeMap::new(),
        problems: Vec::new(),
    };
    // (file, its module, whether its children live in its own directory
    // as for lib.rs, mod.rs and #[path] files)
    let mut queue = vec![("src/lib.rs".to_string(), Vec::new(), true)];
    let mut read = BTreeSet::new();
    while let Some((path, module, owns_dir)) = queue.pop() {
        let Some(text) = sources.get(&path) else {
            continue; // reported where it is declared
        };
        if !read.insert(path.clone()) {
            tree.problem(
                &path,
                1,
                "is declared as a module twice (#[path])".to_string(),
            );
            continue;
        }
        let ast = match syn::parse_file(text) {
            Ok(ast) => ast,
            Err(e) => {
                tree.problem(&path, line(e.span()), format!("does not parse: {e}"));
                continue;
            }
        };
        let dir = if owns_dir {
            parent(&path).to_string()
        } else {
            path.trim_end_matches(".rs").to_string()
        };
        let mut declared = Declared {
            file: &path,
            sources,
            queue: &mut queue,
            tree: &mut tree,
        };
        declared.items(&ast.items, &dir, &module, false);
        tree.files.push(SourceFile { path, module, ast });
    }
    for path in sources.keys() {
        if path != "src/main.rs" && !read.contains(path) {
            tree.problem(
                path,
                1,
                "is not part of the library's module tree (no `mod` declares it), so the \
                 compiler skips it and this test cannot check its imports: declare it or \
                 delete it"
                    .to_string(),
            );
        }
    }
    let mut scopes = BTreeMap::new();
    let mut crate_names = BTreeSet::new();
    let mut macros = BTreeMap::new();
    let mut problems = Vec::new();
    for f in &tree.files {
        let mut collect = CollectScopes {
            file: &f.path,
            ctx: f.module.clone(),
            scopes: &mut scopes,
            crate_names: &mut crate_names,
            macros: &mut macros,
            problems: &mut problems,
        };
        collect.visit_file(&f.ast);
    }
    tree.scopes = scopes;
    tree.crate_names.extend(crate_names);
    tree.macros = macros;
    tree.problems.extend(problems);
    let mut root_macros: BTreeMap<String, BTreeSet<Target>> = BTreeMap::new();
    let root_files = tree.files.iter().filter(|f| f.module.is_empty());
    for r in references(root_files) {
        if let (true, Some(name)) = (r.ctx.is_empty(), &r.in_macro) {
            let targets = tree.targets(&r);
            root_macros.entry(name.clone()).or_default().extend(targets);
        }
    }
    tree.root_macros = root_macros;
    tree
}

impl Tree {
    fn problem(&mut self, file: &str, line: usize, message: String) {
        self.problems.push(Finding {
            rule: Rule::Tree,
            file: file.to_string(),
            line,
            message,
        });
    }
}

/// Follows the `mod` declarations of one file to the files they name.
struct Declared<'a> {
    file: &'a str,
    sources: &'a BTreeMap<String, String>,
    queue: &'a mut Vec<(String, Vec<String>, bool)>,
    tree: &'a mut Tree,
}

impl Declared<'_> {
    fn items(&mut self, items: &[syn::Item], dir: &str, module: &[String], inline: bool) {
        for item in items {
            let syn::Item::Mod(m) = item else { continue };
            let name = m.ident.unraw().to_string();
            let at = line(m.ident.span());
            let mut child = module.to_vec();
            child.push(name.clone());
            if module.is_empty() {
                self.tree
                    .top_level
                    .insert(name.clone(), (self.file.to_string(), at));
            }
            let mut path_attr = None;
            for attr in &m.attrs {
                if attr.path().is_ident("path") {
                    path_attr = Some(attr);
                } else if conditional_path(attr) {
                    self.tree.problem(
                        self.file,
                        at,
                        format!(
                            "`mod {name}` has a conditional #[path], which this test cannot \
                             follow: use a plain `mod` (tests/layers.rs reads the module tree)"
                        ),
                    );
                }
            }
            // Inline modules and #[path] inside them have rules this test
            // does not follow; src/ does not need them.
            if path_attr.is_some() && (inline || m.content.is_some()) {
                self.tree.problem(
                    self.file,
                    at,
                    format!(
                        "#[path] on or inside an inline `mod` ({name}): this test cannot follow \
                         it; declare the file from a file-level `mod`"
                    ),
                );
                continue;
            }
            if let Some((_, items)) = &m.content {
                self.items(items, &format!("{dir}/{name}"), &child, true);
            } else if let Some(attr) = path_attr {
                let value = match &attr.meta {
                    syn::Meta::NameValue(nv) => string_value(&nv.value),
                    _ => None,
                };
                let Some(value) = value else {
                    self.tree
                        .problem(self.file, at, "#[path] without a string".to_string());
                    continue;
                };
                let target = normalize(&format!("{}/{value}", parent(self.file)));
                if !self.sources.contains_key(&target) {
                    self.tree.problem(
                        self.file,
                        at,
                        format!("`mod {name}` names {target}, which does not exist"),
                    );
                }
                self.queue.push((target, child, true));
            } else {
                let flat = format!("{dir}/{name}.rs");
                let nested = format!("{dir}/{name}/mod.rs");
                if self.sources.contains_key(&flat) {
                    self.queue.push((flat, child, false));
                } else if self.sources.contains_key(&nested) {
                    self.queue.push((nested, child, true));
                } else {
                    self.tree.problem(
                        self.file,
                        at,
                        format!("`mod {name};` has no file {flat} or {nested}"),
                    );
                }
            }
        }
    }
}

/// `#[cfg_attr(..., path = "...")]`.
fn conditional_path(attr: &syn::Attribute) -> bool {
    match &attr.meta {
        syn::Meta::List(list) if attr.path().is_ident("cfg_attr") => list
            .tokens
            .clone()
            .into_iter()
            .any(|t| matches!(t, TokenTree::Ident(id) if id == "path")),
        _ => false,
    }
}

/// One leaf of a `use` tree: the path it names, the name it binds.
struct UseLeaf {
    segs: Vec<String>,
    bind: Option<String>,
    glob: bool,
    span: Span,
}

fn use_leaves(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<UseLeaf>) {
    let leaf = |segs: Vec<String>, bind: Option<String>, glob, span| UseLeaf {
        segs,
        bind,
        glob,
        span,
    };
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.unraw().to_string());
            use_leaves(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.unraw().to_string();
            // `use a::{self}` binds `a`.
            if name == "self" {
                out.push(leaf(
                    prefix.clone(),
                    prefix.last().cloned(),
                    false,
                    n.ident.span(),
                ));
            } else {
                let mut segs = prefix.clone();
                segs.push(name.clone());
                out.push(leaf(segs, Some(name), false, n.ident.span()));
            }
        }
        syn::UseTree::Rename(r) => {
            let mut segs = prefix.clone();
            if r.ident != "self" {
                segs.push(r.ident.unraw().to_string());
            }
            let alias = r.rename.unraw().to_string();
            let bind = (alias != "_").then_some(alias);
            out.push(leaf(segs, bind, false, r.ident.span()));
        }
        syn::UseTree::Glob(g) => out.push(leaf(prefix.clone(), None, true, g.star_token.span)),
        syn::UseTree::Group(g) => {
            for item in &g.items {
                use_leaves(item, prefix, out);
            }
        }
    }
}

/// Fills the scopes: child modules, `use` names and globs of each
/// module, and the `macro_rules!` definitions.
struct CollectScopes<'a> {
    file: &'a str,
    ctx: Vec<String>,
    scopes: &'a mut BTreeMap<Vec<String>, Scope>,
    crate_names: &'a mut BTreeSet<String>,
    macros: &'a mut BTreeMap<String, Vec<MacroDef>>,
    problems: &'a mut Vec<Finding>,
}

impl CollectScopes<'_> {
    fn scope(&mut self) -> &mut Scope {
        self.scopes.entry(self.ctx.clone()).or_default()
    }
}

impl<'ast> Visit<'ast> for CollectScopes<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        let name = m.ident.unraw().to_string();
        self.scope().children.insert(name.clone());
        if let Some((_, items)) = &m.content {
            self.ctx.push(name);
            for item in items {
                self.visit_item(item);
            }
            self.ctx.pop();
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut leaves = Vec::new();
        use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
        for leaf in leaves {
            let binding = Binding {
                ctx: self.ctx.clone(),
                segs: leaf.segs,
                leading_colon: u.leading_colon.is_some(),
            };
            if leaf.glob {
                self.scope().globs.push(binding);
            } else if let Some(name) = leaf.bind {
                self.scope().names.entry(name).or_default().push(binding);
            }
        }
    }

    fn visit_item_extern_crate(&mut self, e: &'ast syn::ItemExternCrate) {
        let krate = e.ident.unraw().to_string();
        let name = e
            .rename
            .as_ref()
            .map_or(krate.clone(), |(_, r)| r.unraw().to_string());
        let binding = if krate == "self" {
            self.crate_names.insert(name.clone());
            Binding {
                ctx: Vec::new(),
                segs: vec!["crate".to_string()],
                leading_colon: false,
            }
        } else {
            Binding {
                ctx: self.ctx.clone(),
                segs: vec![krate],
                leading_colon: true,
            }
        };
        self.scope().names.entry(name).or_default().push(binding);
    }

    fn visit_item_macro(&mut self, m: &'ast syn::ItemMacro) {
        if let Some(name) = &m.ident {
            let exported = m.attrs.iter().any(|a| a.path().is_ident("macro_export"));
            self.macros
                .entry(name.unraw().to_string())
                .or_default()
                .push(MacroDef {
                    ctx: self.ctx.clone(),
                    exported,
                });
        }
        visit::visit_item_macro(self, m);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        // Source pulled in by include! is read by no one here.
        let included_source = m.path.is_ident("include")
            && m.tokens
                .clone()
                .into_iter()
                .any(|t| t.to_string().contains(".rs"));
        if included_source {
            self.problems.push(Finding {
                rule: Rule::Tree,
                file: self.file.to_string(),
                line: line(m.path.span()),
                message: "include! of Rust source hides its imports from tests/layers.rs: \
                          make it a module with `mod`"
                    .to_string(),
            });
        }
        visit::visit_macro(self, m);
    }
}

// ------------------------------------------------------------ the references

/// A path as written somewhere in `src/`.
struct Reference {
    file: String,
    line: usize,
    ctx: Vec<String>,
    segs: Vec<String>,
    leading_colon: bool,
    glob: bool,
    /// The path of a macro call (`name!`).
    macro_call: bool,
    /// The `macro_rules!` definition the path is in, if any.
    in_macro: Option<String>,
}

impl Reference {
    fn text(&self) -> String {
        let lead = if self.leading_colon { "::" } else { "" };
        let tail = match (self.glob, self.macro_call) {
            (true, _) => "::*",
            (_, true) => "!",
            _ => "",
        };
        format!("{lead}{}{tail}", self.segs.join("::"))
    }
}

/// Every path written in `files`, in the module it is written in.
fn references<'a>(files: impl Iterator<Item = &'a SourceFile>) -> Vec<Reference> {
    let mut refs = Vec::new();
    for f in files {
        let mut collect = CollectRefs {
            file: &f.path,
            ctx: f.module.clone(),
            in_macro: None,
            out: &mut refs,
        };
        collect.visit_file(&f.ast);
    }
    refs
}

/// Collects every path of one file.
struct CollectRefs<'a> {
    file: &'a str,
    ctx: Vec<String>,
    in_macro: Option<String>,
    out: &'a mut Vec<Reference>,
}

impl CollectRefs<'_> {
    fn push(&mut self, segs: Vec<String>, leading_colon: bool, glob: bool, span: Span) {
        self.push_ref(segs, leading_colon, glob, false, span);
    }

    fn push_ref(
        &mut self,
        segs: Vec<String>,
        leading_colon: bool,
        glob: bool,
        macro_call: bool,
        span: Span,
    ) {
        if segs.is_empty() {
            return;
        }
        self.out.push(Reference {
            file: self.file.to_string(),
            line: line(span),
            ctx: self.ctx.clone(),
            segs,
            leading_colon,
            glob,
            macro_call,
            in_macro: self.in_macro.clone(),
        });
    }

    /// Paths in a token stream (macro arguments, attribute arguments),
    /// and paths in string literals (`#[serde(with = "crate::x")]`).
    fn tokens(&mut self, tokens: TokenStream) {
        let tts: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tts.len() {
            let span = tts[i].span();
            let (leading, mut j) = if colons(&tts, i) {
                (true, i + 2)
            } else {
                (false, i)
            };
            if let Some((first, used)) = segment(&tts, j) {
                let mut segs = vec![first];
                j += used;
                while colons(&tts, j) {
                    let Some((next, used)) = segment(&tts, j + 2) else {
                        break;
                    };
                    segs.push(next);
                    j += 2 + used;
                }
                // A lone identifier in a macro is a variable, not a path.
                if leading || segs.len() > 1 {
                    self.push(segs, leading, false, span);
                }
                i = j;
                continue;
            }
            match &tts[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Literal(l) => {
                    let lit = TokenStream::from(TokenTree::Literal(l.clone()));
                    if let Ok(s) = syn::parse2::<syn::LitStr>(lit) {
                        self.text_path(&s.value(), span);
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }

    /// A path written as text (a string, a doc link), if it is one.
    fn text_path(&mut self, text: &str, span: Span) {
        if let Some((segs, leading)) = parse_path_text(text) {
            self.push(segs, leading, false, span);
        }
    }

    fn doc(&mut self, doc: &str, span: Span) {
        for link in doc_links(doc) {
            self.text_path(&link, span);
        }
        // A path into this crate named in prose is a dependency too.
        for word in doc.split(|c: char| !(c.is_alphanumeric() || "_:$".contains(c))) {
            let word = word.trim_end_matches(':');
            let rooted = ["crate::", "$crate::", "super::", "self::", "::"]
                .iter()
                .any(|p| word.starts_with(p))
                || word.starts_with(&format!("{CRATE_NAME}::"));
            if rooted {
                self.text_path(word, span);
            }
        }
    }
}

fn colons(tts: &[TokenTree], i: usize) -> bool {
    matches!(
        (tts.get(i), tts.get(i + 1)),
        (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
            if a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':'
    )
}

/// A path segment at `i` (`$crate` included) and how many tokens it takes.
fn segment(tts: &[TokenTree], i: usize) -> Option<(String, usize)> {
    match tts.get(i)? {
        TokenTree::Ident(id) => Some((id.unraw().to_string(), 1)),
        TokenTree::Punct(p) if p.as_char() == '$' => match tts.get(i + 1)? {
            TokenTree::Ident(id) if id == "crate" => Some(("$crate".to_string(), 2)),
            _ => None,
        },
        _ => None,
    }
}

/// `a::b::c` or `::a::b` as segments, if `text` is such a path.
fn parse_path_text(text: &str) -> Option<(Vec<String>, bool)> {
    let (leading, body) = match text.strip_prefix("::") {
        Some(body) => (true, body),
        None => (false, text),
    };
    let segs: Vec<String> = body.split("::").map(str::to_string).collect();
    let ident = |s: &str| {
        let s = s.strip_prefix("r#").unwrap_or(s);
        s.chars()
            .next()
            .is_some_and(|c| c.is_alphabetic() || c == '_')
            && s.chars().all(|c| c.is_alphanumeric() || c == '_')
    };
    let ok = segs
        .iter()
        .enumerate()
        .all(|(i, s)| ident(s) || (i == 0 && s == "$crate"));
    ok.then(|| {
        let segs = segs
            .into_iter()
            .map(|s| s.strip_prefix("r#").map_or(s.clone(), str::to_string))
            .collect();
        (segs, leading)
    })
}

/// The targets of the intra-doc links of one doc line: `[path]`,
/// ``[`path`]``, `[text](path)`, `[label]: path`, with rustdoc's
/// disambiguators (`fn@`, `()`, `!`) taken off.
fn doc_links(doc: &str) -> Vec<String> {
    let mut raw = Vec::new();
    let mut rest = doc;
    while let Some(open) = rest.find('[') {
        rest = &rest[open + 1..];
        let Some(close) = rest.find(']') else { break };
        raw.push(&rest[..close]);
        let tail = &rest[close + 1..];
        if let Some(t) = tail.strip_prefix('(') {
            raw.push(t.split(')').next().unwrap_or(""));
        } else if let Some(t) = tail.strip_prefix(':') {
            raw.push(t.split_whitespace().next().unwrap_or(""));
        }
    }
    raw.into_iter()
        .map(|link| {
            let link = link.trim().trim_matches('`');
            let link = match link.split_once('@') {
                Some((kind, path)) if kind.chars().all(|c| c.is_ascii_alphabetic()) => path,
                _ => link,
            };
            let link = link.trim_end_matches("()").trim_end_matches('!');
            link.trim_matches('`').to_string()
        })
        .collect()
}

impl<'ast> Visit<'ast> for CollectRefs<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        for attr in &m.attrs {
            self.visit_attribute(attr);
        }
        if let Some((_, items)) = &m.content {
            self.ctx.push(m.ident.unraw().to_string());
            for item in items {
                self.visit_item(item);
            }
            self.ctx.pop();
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        for attr in &u.attrs {
            self.visit_attribute(attr);
        }
        let mut leaves = Vec::new();
        use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
        for leaf in leaves {
            self.push(leaf.segs, u.leading_colon.is_some(), leaf.glob, leaf.span);
        }
    }

    fn visit_item_extern_crate(&mut self, e: &'ast syn::ItemExternCrate) {
        for attr in &e.attrs {
            self.visit_attribute(attr);
        }
        if e.ident != "self" {
            self.push(
                vec![e.ident.unraw().to_string()],
                true,
                false,
                e.ident.span(),
            );
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segs = p.segments.iter().map(|s| s.ident.unraw().to_string());
        self.push(segs.collect(), p.leading_colon.is_some(), false, p.span());
        visit::visit_path(self, p);
    }

    fn visit_item_macro(&mut self, m: &'ast syn::ItemMacro) {
        let outer = self.in_macro.take();
        self.in_macro = m.ident.as_ref().map(|i| i.unraw().to_string());
        visit::visit_item_macro(self, m);
        self.in_macro = outer;
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        let segs = m.path.segments.iter().map(|s| s.ident.unraw().to_string());
        let leading = m.path.leading_colon.is_some();
        self.push_ref(segs.collect(), leading, false, true, m.path.span());
        self.tokens(m.tokens.clone());
    }

    fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
        match &attr.meta {
            syn::Meta::NameValue(nv) if attr.path().is_ident("doc") => {
                if let Some(doc) = string_value(&nv.value) {
                    self.doc(&doc, attr.span());
                }
            }
            syn::Meta::NameValue(nv) => {
                if let Some(s) = string_value(&nv.value) {
                    self.text_path(&s, nv.value.span());
                }
            }
            syn::Meta::List(list) => self.tokens(list.tokens.clone()),
            syn::Meta::Path(_) => {}
        }
        visit::visit_attribute(self, attr);
    }
}

// ------------------------------------------------------------- resolution

/// What a path names, for the rules: a top-level module of this crate, or
/// a path into another crate.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    Module(String),
    Extern(Vec<String>),
}

/// Where a path ends up.
enum Place {
    Module(Vec<String>),
    Extern,
    Item,
}

/// Deep enough for any chain of re-exports, short of a loop.
const MAX_DEPTH: usize = 16;

impl Tree {
    /// Every top-level module a path written in module `ctx` passes
    /// through (re-exports followed), and the extern path it reaches.
    fn targets(&self, r: &Reference) -> BTreeSet<Target> {
        let mut seen = BTreeSet::new();
        self.resolve(&r.ctx, &r.segs, r.leading_colon, &mut seen, 0);
        seen
    }

    fn resolve(
        &self,
        ctx: &[String],
        segs: &[String],
        leading_colon: bool,
        seen: &mut BTreeSet<Target>,
        depth: usize,
    ) -> Vec<Place> {
        let Some((first, rest)) = segs.split_first() else {
            return Vec::new();
        };
        if depth > MAX_DEPTH {
            return Vec::new();
        }
        if leading_colon {
            return if self.crate_names.contains(first) {
                self.walk(Vec::new(), rest, seen, depth)
            } else {
                seen.insert(Target::Extern(segs.to_vec()));
                vec![Place::Extern]
            };
        }
        match first.as_str() {
            "crate" | "$crate" => self.walk(Vec::new(), rest, seen, depth),
            "self" | "super" => {
                let mut at = ctx.to_vec();
                let mut i = usize::from(first == "self");
                while segs.get(i).is_some_and(|s| s == "super") {
                    at.pop();
                    i += 1;
                }
                self.walk(at, &segs[i..], seen, depth)
            }
            _ => self.step(ctx, first, rest, seen, depth, true),
        }
    }

    /// From module `at`, follows `rest`.
    fn walk(
        &self,
        at: Vec<String>,
        rest: &[String],
        seen: &mut BTreeSet<Target>,
        depth: usize,
    ) -> Vec<Place> {
        if let Some(top) = at.first() {
            seen.insert(Target::Module(top.clone()));
        }
        match rest.split_first() {
            None => vec![Place::Module(at)],
            Some((name, more)) => self.step(&at, name, more, seen, depth, false),
        }
    }

    /// Looks `name` up in module `at` (as the first segment of a path when
    /// `bare`), then follows `more`.
    fn step(
        &self,
        at: &[String],
        name: &str,
        more: &[String],
        seen: &mut BTreeSet<Target>,
        depth: usize,
        bare: bool,
    ) -> Vec<Place> {
        let mut places = Vec::new();
        if at.is_empty() {
            for def in self.macros.get(name).into_iter().flatten() {
                if def.exported {
                    self.macro_targets(name, def, seen);
                    places.push(Place::Item);
                }
            }
        }
        if let Some(scope) = self.scopes.get(at) {
            if scope.children.contains(name) {
                let mut child = at.to_vec();
                child.push(name.to_string());
                places.extend(self.walk(child, more, seen, depth));
            }
            for b in scope.names.get(name).into_iter().flatten() {
                let segs = [b.segs.as_slice(), more].concat();
                places.extend(self.resolve(&b.ctx, &segs, b.leading_colon, seen, depth + 1));
            }
            if places.is_empty() {
                // A name a glob brought in (`use super::*` of the crate
                // root brings every top-level module).
                for g in &scope.globs {
                    let mut ignore = BTreeSet::new();
                    let from =
                        self.resolve(&g.ctx, &g.segs, g.leading_colon, &mut ignore, depth + 1);
                    for place in from {
                        let Place::Module(m) = place else { continue };
                        let has = self.scopes.get(&m).is_some_and(|s| {
                            s.children.contains(name) || s.names.contains_key(name)
                        });
                        if has {
                            places.extend(self.step(&m, name, more, seen, depth + 1, false));
                        }
                    }
                }
            }
        }
        if places.is_empty() && bare {
            if self.crate_names.contains(name) {
                return self.walk(Vec::new(), more, seen, depth);
            }
            // An extern crate, or a local name (then harmless).
            let mut segs = vec![name.to_string()];
            segs.extend(more.iter().cloned());
            seen.insert(Target::Extern(segs));
            return vec![Place::Extern];
        }
        if places.is_empty() {
            places.push(Place::Item);
        }
        places
    }
}

impl Tree {
    /// What calling macro `name`, defined at `def`, imports.
    fn macro_targets(&self, name: &str, def: &MacroDef, seen: &mut BTreeSet<Target>) {
        match def.ctx.first() {
            Some(top) => {
                seen.insert(Target::Module(top.clone()));
            }
            None => seen.extend(self.root_macros.get(name).into_iter().flatten().cloned()),
        }
    }
}

/// One import of a top-level module: a reference and what it names.
struct Import {
    file: String,
    line: usize,
    from: String,
    text: String,
    target: Target,
    glob: bool,
}

fn imports(tree: &Tree) -> Vec<Import> {
    let mut out = Vec::new();
    for r in &references(tree.files.iter()) {
        // The crate root belongs to no layer; what it re-exports is
        // followed from where it is used.
        let Some(from) = r.ctx.first() else { continue };
        let mut targets = tree.targets(r);
        if let ([name], true) = (r.segs.as_slice(), r.macro_call) {
            // A bare `name!` may be a macro of another module in textual
            // scope (`#[macro_use] mod ...`), unless this module has its own.
            let defs = tree.macros.get(name).into_iter().flatten();
            let own = defs.clone().any(|d| d.ctx.first() == Some(from));
            for def in defs.filter(|_| !own) {
                tree.macro_targets(name, def, &mut targets);
            }
        }
        for target in targets {
            out.push(Import {
                file: r.file.clone(),
                line: r.line,
                from: from.clone(),
                text: r.text(),
                target,
                glob: r.glob,
            });
        }
    }
    out
}

/// Everything wrong with a tree, each finding once.
fn check(tree: &Tree) -> Vec<Finding> {
    let mut out: BTreeSet<Finding> = tree.problems.iter().cloned().collect();
    for (module, (file, line)) in &tree.top_level {
        if layer(module).is_none() {
            out.insert(Finding {
                rule: Rule::Placement,
                file: file.clone(),
                line: *line,
                message: format!(
                    "`{module}` is a top-level module with no place in the layers: add it to \
                     LAYERS in tests/layers.rs and to the drawing in {RULE}, below every module \
                     it imports and above every module that imports it"
                ),
            });
        }
    }
    for i in imports(tree) {
        let finding = |rule, message| Finding {
            rule,
            file: i.file.clone(),
            line: i.line,
            message,
        };
        match &i.target {
            Target::Module(to) => {
                if let Some(why) = layer_rule(&i.from, to) {
                    out.insert(finding(
                        Rule::Layer,
                        format!(
                            "`{}` makes `{}` import `{to}`: {why}. Rule ({RULE}): each module \
                             imports only modules below it: {}",
                            i.text,
                            i.from,
                            drawing()
                        ),
                    ));
                }
            }
            Target::Extern(path) => {
                if let Some(why) = terminal_ui_rule(&i.from, path, i.glob) {
                    out.insert(finding(Rule::TerminalUi, format!("`{}`: {why}", i.text)));
                }
            }
        }
    }
    out.into_iter().collect()
}

/// Which top-level module imports which.
fn graph(tree: &Tree) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = tree
        .top_level
        .keys()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    for i in imports(tree) {
        if let Target::Module(to) = i.target
            && to != i.from
        {
            graph.entry(i.from).or_default().insert(to);
        }
    }
    graph
}

/// A circle through the graph, if there is one.
fn find_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_string());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

// ------------------------------------------------------------ the real src/

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn load_src() -> Tree {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let sources = files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy();
            (rel.replace('\\', "/"), std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    load(&sources)
}

/// What the checks found in the real `src/`, worked out once for all the
/// tests below (syn types cannot be shared between test threads).
struct Src {
    findings: Vec<Finding>,
    graph: BTreeMap<String, BTreeSet<String>>,
    top_level: BTreeSet<String>,
}

fn src() -> &'static Src {
    static SRC: OnceLock<Src> = OnceLock::new();
    SRC.get_or_init(|| {
        let tree = load_src();
        Src {
            findings: check(&tree),
            graph: graph(&tree),
            top_level: tree.top_level.keys().cloned().collect(),
        }
    })
}

fn findings(rules: &[Rule]) -> Vec<Finding> {
    let mut found = src().findings.clone();
    found.retain(|f| rules.contains(&f.rule));
    found
}

#[test]
fn every_top_level_module_has_its_place_in_the_layers() {
    let found = findings(&[Rule::Tree, Rule::Placement]);
    assert!(
        found.is_empty(),
        "src/ does not fit the layers:\n{}",
        report(&found)
    );
    for module in LAYERS.iter().flat_map(|l| l.iter()) {
        assert!(
            src().top_level.contains(*module),
            "LAYERS in tests/layers.rs names `{module}`, which src/lib.rs does not declare: \
             take it out of LAYERS and out of the drawing in {RULE}"
        );
    }
    // The drawing names every module of the table.
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md"))
            .unwrap();
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Layers of `src/`"))
        .expect("docs/architecture.md has no section \"Layers of `src/`\"");
    for module in LAYERS.iter().flat_map(|l| l.iter()) {
        let drawn = section
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|w| w == *module);
        assert!(
            drawn,
            "`{module}` is in LAYERS (tests/layers.rs) but not drawn in {RULE}: draw it there"
        );
    }
}

#[test]
fn every_import_goes_down_the_layers() {
    let found = findings(&[Rule::Layer]);
    assert!(
        found.is_empty(),
        "imports against the layers:\n{}",
        report(&found)
    );
}

#[test]
fn the_core_never_uses_the_terminal_ui() {
    let found = findings(&[Rule::TerminalUi]);
    assert!(
        found.is_empty(),
        "the core uses the terminal UI:\n{}",
        report(&found)
    );
}

#[test]
fn the_import_graph_of_src_has_no_circle() {
    let graph = &src().graph;
    if let Some(circle) = find_circle(graph) {
        panic!(
            "src/ has an import circle: {}\n(each module may import only modules below it; \
             see {RULE})",
            circle.join(" -> ")
        );
    }
}

#[test]
fn the_checker_sees_the_imports_of_src() {
    // A checker that reads nothing passes everything: it must see the
    // imports the drawing is built on.
    let graph = &src().graph;
    assert!(graph.len() > 10, "too few modules found: {graph:?}");
    for (from, to) in [("cli", "ui"), ("cli", "client"), ("ui", "client")] {
        assert!(
            graph[from].contains(to),
            "the checker no longer sees `{from}` import `{to}`: {graph:?}"
        );
    }
    for (from, to) in SIDEWAYS {
        assert!(
            graph[*from].contains(*to),
            "`{from}` no longer imports `{to}`: take ({from:?}, {to:?}) out of SIDEWAYS in \
             tests/layers.rs so the drawing of {RULE} holds for them too"
        );
    }
}

// ------------------------------------------------- the checker's own tests

/// A synthetic `src/`: each file's path and text.
type Files<'a> = &'a [(&'a str, &'a str)];

/// The findings for a synthetic `src/`; `src/lib.rs`, when not given,
/// declares each top-level file.
fn findings_in(files: Files) -> Vec<Finding> {
    let mut sources: BTreeMap<String, String> = files
        .iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect();
    if !sources.contains_key("src/lib.rs") {
        let mut lib = String::new();
        for path in sources.keys() {
            let rest = path.strip_prefix("src/").unwrap();
            let module = rest.strip_suffix("/mod.rs").or(rest.strip_suffix(".rs"));
            if let Some(m) = module.filter(|m| !m.contains('/')) {
                lib.push_str(&format!("pub mod {m};\n"));
            }
        }
        sources.insert("src/lib.rs".to_string(), lib);
    }
    check(&load(&sources))
}

const CLI: (&str, &str) = (
    "src/cli.rs",
    "pub fn run() {}\npub const NAME: &str = \"\";\n",
);

#[test]
fn the_checker_catches_every_form_of_import() {
    // (form, files, where the one violation is, what its message says)
    let cases: &[(&str, Files, &str, usize, &str)] = &[
        (
            "crate::",
            &[
                CLI,
                (
                    "src/engine.rs",
                    "pub fn boot() {\n    crate::cli::run();\n}\n",
                ),
            ],
            "src/engine.rs",
            2,
            "`crate::cli::run` makes `engine` import `cli`",
        ),
        (
            "super:: chain from a nested ui file",
            &[
                CLI,
                ("src/ui/mod.rs", "mod app;\n"),
                ("src/ui/app.rs", "mod input;\n"),
                ("src/ui/app/input.rs", "use super::super::super::cli;\n"),
            ],
            "src/ui/app/input.rs",
            1,
            "makes `ui` import `cli`",
        ),
        (
            "self:: inside an inline mod",
            &[
                CLI,
                (
                    "src/engine.rs",
                    "mod inner {\n    pub fn f() {\n        self::super::super::cli::run();\n    }\n}\n",
                ),
            ],
            "src/engine.rs",
            3,
            "makes `engine` import `cli`",
        ),
        (
            "a `use ... as` rename, then the alias",
            &[
                CLI,
                (
                    "src/engine/mod.rs",
                    "use super as root;\n\npub fn boot() {\n    root::cli::run();\n}\n",
                ),
            ],
            "src/engine/mod.rs",
            4,
            "`root::cli::run` makes `engine` import `cli`",
        ),
        (
            "a re-export at the crate root",
            &[
                (
                    "src/lib.rs",
                    "pub mod cli;\npub mod engine;\npub use cli::run as start;\n",
                ),
                CLI,
                ("src/engine.rs", "pub fn boot() {\n    crate::start();\n}\n"),
            ],
            "src/engine.rs",
            2,
            "makes `engine` import `cli`",
        ),
        (
            "a glob",
            &[CLI, ("src/engine.rs", "use crate::cli::*;\n")],
            "src/engine.rs",
            1,
            "`crate::cli::*` makes `engine` import `cli`",
        ),
        (
            "a glob of the crate root, then a bare name",
            &[
                CLI,
                (
                    "src/engine/mod.rs",
                    "use super::*;\n\npub fn boot() {\n    cli::run();\n}\n",
                ),
            ],
            "src/engine/mod.rs",
            4,
            "makes `engine` import `cli`",
        ),
        (
            "a group",
            &[
                CLI,
                ("src/config.rs", "pub struct Config;\n"),
                ("src/engine.rs", "use crate::{cli::run, config::Config};\n"),
            ],
            "src/engine.rs",
            1,
            "`crate::cli::run` makes `engine` import `cli`",
        ),
        (
            "a path inside a macro invocation",
            &[
                CLI,
                (
                    "src/engine.rs",
                    "pub fn boot() {\n    println!(\"{}\", crate::cli::NAME);\n}\n",
                ),
            ],
            "src/engine.rs",
            2,
            "makes `engine` import `cli`",
        ),
        (
            "a doc link",
            &[
                CLI,
                (
                    "src/engine.rs",
                    "/// Started by [`crate::cli::run`].\npub fn boot() {}\n",
                ),
            ],
            "src/engine.rs",
            1,
            "makes `engine` import `cli`",
        ),
        (
            "a super:: doc link",
            &[CLI, ("src/engine.rs", "//! Below [super::cli].\n")],
            "src/engine.rs",
            1,
            "`super::cli` makes `engine` import `cli`",
        ),
        (
            "a path in an attribute's string",
            &[
                CLI,
                (
                    "src/engine.rs",
                    "#[serde(with = \"crate::cli::format\")]\npub struct S;\n",
                ),
            ],
            "src/engine.rs",
            1,
            "makes `engine` import `cli`",
        ),
        (
            "::lazaret:: naming this crate",
            &[
                CLI,
                (
                    "src/engine.rs",
                    "pub fn f() {\n    ::lazaret::cli::run();\n}\n",
                ),
            ],
            "src/engine.rs",
            2,
            "makes `engine` import `cli`",
        ),
        (
            "#[path] moving a module's file",
            &[
                (
                    "src/lib.rs",
                    "pub mod cli;\n#[path = \"front/ui.rs\"]\npub mod ui;\n",
                ),
                CLI,
                ("src/front/ui.rs", "\nuse crate::cli;\n"),
            ],
            "src/front/ui.rs",
            2,
            "makes `ui` import `cli`",
        ),
        (
            "two modules side by side",
            &[
                ("src/doctor.rs", "pub struct Check;\n"),
                ("src/coordinator.rs", "use crate::doctor::Check;\n"),
            ],
            "src/coordinator.rs",
            1,
            "`coordinator` and `doctor` sit side by side",
        ),
        (
            "::ratatui below client",
            &[(
                "src/engine.rs",
                "pub fn draw(_: &mut ::ratatui::Frame) {}\n",
            )],
            "src/engine.rs",
            1,
            "`::ratatui::Frame`: `engine` is below `client`",
        ),
        (
            "a renamed widgets import below client",
            &[(
                "src/engine.rs",
                "use lazaret_widgets as w;\n\npub fn f() {\n    w::pane::Pane::default();\n}\n",
            )],
            "src/engine.rs",
            4,
            "may not use lazaret_widgets::pane",
        ),
        (
            "a glob of the widgets below client",
            &[("src/config.rs", "use lazaret_widgets::*;\n")],
            "src/config.rs",
            1,
            "may not use all of lazaret_widgets",
        ),
        (
            "extern crate below client",
            &[("src/net.rs", "extern crate crossterm as term;\n")],
            "src/net.rs",
            1,
            "`net` is below `client`, part of the core, and may not use crossterm",
        ),
        (
            "crossterm inside a macro below client",
            &[(
                "src/net.rs",
                "pub fn f() {\n    let _ = format!(\"{:?}\", crossterm::event::KeyCode::Enter);\n}\n",
            )],
            "src/net.rs",
            2,
            "may not use crossterm",
        ),
        (
            "an exported macro of cli, called through the crate root",
            &[
                (
                    "src/cli.rs",
                    "#[macro_export]\nmacro_rules! shout {\n    () => {};\n}\n",
                ),
                ("src/engine.rs", "pub fn f() {\n    crate::shout!();\n}\n"),
            ],
            "src/engine.rs",
            2,
            "`crate::shout!` makes `engine` import `cli`",
        ),
        (
            "a macro of cli in textual scope (#[macro_use])",
            &[
                (
                    "src/lib.rs",
                    "#[macro_use]\npub mod cli;\npub mod engine;\n",
                ),
                ("src/cli.rs", "macro_rules! shout {\n    () => {};\n}\n"),
                ("src/engine.rs", "pub fn f() {\n    shout!();\n}\n"),
            ],
            "src/engine.rs",
            2,
            "`shout!` makes `engine` import `cli`",
        ),
        (
            "a macro at the crate root that expands to cli",
            &[
                (
                    "src/lib.rs",
                    "macro_rules! run_cli {\n    () => {\n        $crate::cli::run()\n    };\n}\n\
                     pub mod cli;\npub mod engine;\n",
                ),
                CLI,
                ("src/engine.rs", "pub fn f() {\n    run_cli!();\n}\n"),
            ],
            "src/engine.rs",
            2,
            "`run_cli!` makes `engine` import `cli`",
        ),
        (
            "include! of Rust source",
            &[("src/engine.rs", "include!(\"../cli/helper.rs\");\n")],
            "src/engine.rs",
            1,
            "include! of Rust source hides its imports",
        ),
        (
            "a new top-level module",
            &[("src/gadget.rs", "")],
            "src/lib.rs",
            1,
            "add it to LAYERS in tests/layers.rs and to the drawing in docs/architecture.md",
        ),
        (
            "a file outside the module tree",
            &[
                ("src/lib.rs", "pub mod engine;\n"),
                ("src/engine.rs", ""),
                ("src/engine/stray.rs", "use crate::cli;\n"),
            ],
            "src/engine/stray.rs",
            1,
            "is not part of the library's module tree",
        ),
    ];
    for (form, files, file, line, says) in cases {
        let found = findings_in(files);
        let caught = found.len() == 1
            && found[0].file == *file
            && found[0].line == *line
            && found[0].message.contains(says);
        assert!(
            caught,
            "{form}: expected one finding at {file}:{line} saying {says:?}, got:\n{}",
            report(&found)
        );
    }
}

#[test]
fn the_checker_passes_what_the_layers_allow() {
    let cases: &[(&str, Files)] = &[
        (
            "imports down the layers, in every form",
            &[
                (
                    "src/config.rs",
                    "use crate::domain::Anchor;\npub struct Config;\n",
                ),
                (
                    "src/domain.rs",
                    "use crate::rundir::Dir;\npub struct Anchor;\n",
                ),
                // The bottom modules import each other.
                (
                    "src/rundir.rs",
                    "use crate::domain::Anchor;\npub struct Dir;\n",
                ),
                ("src/podman.rs", "pub struct Podman;\n"),
                ("src/net.rs", "pub const NAME: &str = \"\";\n"),
                (
                    "src/engine/mod.rs",
                    "//! Reads [`crate::config::Config`], see [super::net].\n\
                     use crate::config::Config;\nuse super::podman;\nuse crate as root;\n\
                     pub fn f() {\n    let _ = format!(\"{}\", crate::net::NAME);\n    \
                     let _ = root::podman::Podman;\n}\n\
                     mod tests {\n    use super::*;\n}\n",
                ),
                // Sideways, as the code does today (SIDEWAYS).
                ("src/coordinator.rs", "pub mod confine {}\n"),
                ("src/doctor.rs", "use crate::coordinator::confine;\n"),
            ],
        ),
        (
            "macros: a module's own, and the root's naming what the caller may import",
            &[
                (
                    "src/lib.rs",
                    "macro_rules! config_name {\n    () => {\n        $crate::config::NAME\n    };\n}\n\
                     pub mod config;\npub mod engine;\n",
                ),
                ("src/config.rs", "pub const NAME: &str = \"\";\n"),
                (
                    "src/engine.rs",
                    "macro_rules! here {\n    () => {};\n}\n\
                     pub fn f() -> &'static str {\n    here!();\n    config_name!()\n}\n",
                ),
            ],
        ),
        (
            "self:: and super:: name the module's own items",
            &[
                (
                    "src/ui/mod.rs",
                    "mod app;\nmod cli {\n    pub fn run() {}\n}\n\
                     pub fn f() {\n    self::cli::run();\n}\n",
                ),
                ("src/ui/app.rs", "pub fn g() {\n    super::cli::run();\n}\n"),
            ],
        ),
        (
            "the terminal UI's crates above the core, visible text below it",
            &[
                (
                    "src/engine.rs",
                    "use lazaret_widgets as w;\nuse lazaret_widgets::visible::visible;\n\
                     pub fn f(s: &str) -> String {\n    w::visible::make_visible(s);\n    visible(s)\n}\n",
                ),
                (
                    "src/ui.rs",
                    "use ratatui::Frame;\nuse crossterm::event;\nuse lazaret_widgets::pane::Pane;\n",
                ),
                ("src/client.rs", "pub fn f(_: &mut ::ratatui::Frame) {}\n"),
            ],
        ),
    ];
    for (what, files) in cases {
        let found = findings_in(files);
        assert!(
            found.is_empty(),
            "{what}: expected no finding, got:\n{}",
            report(&found)
        );
    }
}

#[test]
fn the_circle_finder_finds_circles() {
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(find_circle(&g).unwrap(), ["a", "b", "a"]);
    g.insert("b".to_string(), BTreeSet::new());
    assert!(find_circle(&g).is_none());
}
