//! The public API of a crate as a listing of lines, one per public item, read from its source
//! with `syn` (rustdoc's JSON output, which `cargo-semver-checks` reads, needs a nightly
//! toolchain or a tool that takes minutes to build; this reads what it needs in milliseconds).
//!
//! Every `.rs` file under the crate's `src/` is read (a `pub` item of a private module counts:
//! the crates re-export their modules' items). Listed, each as one line with its signature as
//! tokens (documentation left out):
//! - free `pub fn`s, as `fn <file module>::<name>(...)`;
//! - `pub` structs, enums, traits, consts, statics, type aliases and `macro_rules!` with
//!   `#[macro_export]`, with their derives and `#[non_exhaustive]`; each `pub` field of a
//!   struct and each variant of an enum on a line of its own;
//! - `pub fn`s of inherent impls as `fn <Type>::<name>(...)`, and each trait impl as `impl`;
//! - `pub use` re-exports.
//!
//! Items a `macro_rules!` generates are not seen; neither are `#[cfg(test)]` modules.
//! [`breaking`] compares two listings and [`is_breaking_bump`] two versions (semver: for
//! `0.x`, a new minor version is a breaking one).

use std::path::Path;

use quote::ToTokens;

/// One public item.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Item {
    /// `<Type>::<name>` for a method, `<file module>::<name>` for anything else.
    pub path: String,
    /// The listing line (kind, path and signature).
    pub line: String,
}

/// The public items of the crate whose sources are under `src`, sorted by line.
///
/// # Errors
/// A file that cannot be read or parsed, named with the error.
pub fn public_items(src: &Path) -> Result<Vec<Item>, String> {
    let mut files = Vec::new();
    collect_rs(src, &mut files).map_err(|e| format!("{}: {e}", src.display()))?;
    let mut items = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let parsed = syn::parse_file(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        let module = file.file_stem().and_then(|s| s.to_str()).unwrap_or("").to_string();
        list_items(&module, &parsed.items, &mut items);
    }
    // Impls of types that are not public (a `pub fn` of a private type is not API).
    let public_types: Vec<String> = items
        .iter()
        .filter(|i| i.line.starts_with("struct ") || i.line.starts_with("enum ") || i.line.starts_with("type "))
        .filter_map(|i| i.path.rsplit("::").next().map(str::to_string))
        .collect();
    items.retain(|i| match i.line.split_once(' ') {
        Some(("fn" | "const" | "impl", _)) if !i.path.contains(": ") && i.path.matches("::").count() > 1 => true,
        Some(("fn" | "const" | "impl", _)) => {
            let ty = i.path.split([':', ' ', '<']).next().unwrap_or("");
            ty.chars().next().is_some_and(char::is_lowercase) || public_types.iter().any(|p| p == ty)
        }
        _ => true,
    });
    items.sort();
    items.dedup();
    Ok(items)
}

/// The listing: the lines of [`public_items`].
///
/// # Errors
/// As [`public_items`].
pub fn listing(src: &Path) -> Result<Vec<String>, String> {
    Ok(public_items(src)?.into_iter().map(|i| i.line).collect())
}

/// The lines of `baseline` that `current` lacks: items removed or changed.
pub fn breaking<'a>(baseline: &'a [String], current: &[String]) -> Vec<&'a str> {
    baseline.iter().filter(|l| !current.contains(l)).map(String::as_str).collect()
}

/// Whether going from version `from` to `to` (`major.minor.patch`) may break users: a new
/// major version, or a new minor version while the major is 0.
pub fn is_breaking_bump(from: &str, to: &str) -> bool {
    let parts = |v: &str| -> Vec<u64> { v.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    let (a, b) = (parts(from), parts(to));
    let at = |v: &Vec<u64>, i: usize| v.get(i).copied().unwrap_or(0);
    if at(&b, 0) != at(&a, 0) {
        return at(&b, 0) > at(&a, 0);
    }
    at(&a, 0) == 0 && at(&b, 1) > at(&a, 1)
}

fn collect_rs(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.path());
    for entry in entries {
        let path = entry.path();
        if path.is_dir() {
            collect_rs(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

fn tokens(t: &impl ToTokens) -> String {
    t.to_token_stream().to_string()
}

fn is_pub(vis: &syn::Visibility) -> bool {
    matches!(vis, syn::Visibility::Public(_))
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| a.path().is_ident("cfg") && tokens(&a.meta).contains("test"))
}

/// `fields` without their documentation: a field's doc comment is not part of the API.
fn undocumented(fields: &syn::Fields) -> syn::Fields {
    let mut fields = fields.clone();
    for field in fields.iter_mut() {
        field.attrs.retain(|a| !a.path().is_ident("doc"));
    }
    fields
}

/// The attributes that change what users may do: derives, `non_exhaustive`, `repr`.
fn api_attrs(attrs: &[syn::Attribute]) -> String {
    let kept: Vec<String> = attrs
        .iter()
        .filter(|a| ["derive", "non_exhaustive", "repr", "must_use"].iter().any(|n| a.path().is_ident(n)))
        .map(|a| format!("#[{}]", tokens(&a.meta)))
        .collect();
    if kept.is_empty() {
        String::new()
    } else {
        format!("{} ", kept.join(" "))
    }
}

fn push(out: &mut Vec<Item>, path: String, line: String) {
    out.push(Item { path, line });
}

fn list_items(module: &str, items: &[syn::Item], out: &mut Vec<Item>) {
    for item in items {
        match item {
            syn::Item::Fn(f) if is_pub(&f.vis) && !is_cfg_test(&f.attrs) => {
                let path = format!("{module}::{}", f.sig.ident);
                let line = format!("fn {path}: {}{}", api_attrs(&f.attrs), tokens(&f.sig));
                push(out, path, line);
            }
            syn::Item::Struct(s) if is_pub(&s.vis) => {
                let path = format!("{module}::{}", s.ident);
                let generics = tokens(&s.generics);
                push(out, path.clone(), format!("struct {path}{generics}: {}", api_attrs(&s.attrs)));
                for (i, field) in s.fields.iter().enumerate().filter(|(_, f)| is_pub(&f.vis)) {
                    let name = field.ident.as_ref().map_or(i.to_string(), ToString::to_string);
                    let line = format!("field {path}.{name}: {}", tokens(&field.ty));
                    push(out, format!("{path}.{name}"), line);
                }
            }
            syn::Item::Enum(e) if is_pub(&e.vis) => {
                let path = format!("{module}::{}", e.ident);
                let generics = tokens(&e.generics);
                push(out, path.clone(), format!("enum {path}{generics}: {}", api_attrs(&e.attrs)));
                for v in &e.variants {
                    let discriminant =
                        v.discriminant.as_ref().map_or(String::new(), |(_, d)| format!(" = {}", tokens(d)));
                    let line =
                        format!("variant {path}::{}: {}{discriminant}", v.ident, tokens(&undocumented(&v.fields)));
                    push(out, format!("{path}::{}", v.ident), line);
                }
            }
            syn::Item::Trait(t) if is_pub(&t.vis) => {
                let path = format!("{module}::{}", t.ident);
                push(out, path.clone(), format!("trait {path}{}", tokens(&t.generics)));
                for ti in &t.items {
                    if let syn::TraitItem::Fn(f) = ti {
                        let default = if f.default.is_some() { " (provided)" } else { "" };
                        let line = format!("trait-fn {path}::{}: {}{default}", f.sig.ident, tokens(&f.sig));
                        push(out, format!("{path}::{}", f.sig.ident), line);
                    }
                }
            }
            syn::Item::Const(c) if is_pub(&c.vis) => {
                let path = format!("{module}::{}", c.ident);
                push(out, path.clone(), format!("const {path}: {} = {}", tokens(&c.ty), tokens(&c.expr)));
            }
            syn::Item::Static(s) if is_pub(&s.vis) => {
                let path = format!("{module}::{}", s.ident);
                push(out, path.clone(), format!("static {path}: {}", tokens(&s.ty)));
            }
            syn::Item::Type(t) if is_pub(&t.vis) => {
                let path = format!("{module}::{}", t.ident);
                push(out, path.clone(), format!("type {path}{} = {}", tokens(&t.generics), tokens(&t.ty)));
            }
            syn::Item::Use(u) if is_pub(&u.vis) => {
                push(out, format!("{module}::use"), format!("use {module}: {}", tokens(&u.tree)));
            }
            syn::Item::Macro(m) if m.attrs.iter().any(|a| a.path().is_ident("macro_export")) => {
                if let Some(name) = &m.ident {
                    push(out, format!("{module}::{name}"), format!("macro {module}::{name}!"));
                }
            }
            syn::Item::Mod(m) if is_pub(&m.vis) && !is_cfg_test(&m.attrs) => {
                if let Some((_, inner)) = &m.content {
                    list_items(&format!("{module}::{}", m.ident), inner, out);
                }
            }
            syn::Item::Impl(i) if !is_cfg_test(&i.attrs) => list_impl(i, out),
            _ => {}
        }
    }
}

fn list_impl(i: &syn::ItemImpl, out: &mut Vec<Item>) {
    let self_ty = tokens(&i.self_ty);
    if let Some((bang, trait_path, _)) = &i.trait_ {
        let not = if bang.is_some() { "!" } else { "" };
        let path = format!("{self_ty}: {not}{}", tokens(trait_path));
        push(out, path.clone(), format!("impl {path}"));
        return;
    }
    for ii in &i.items {
        if let syn::ImplItem::Fn(f) = ii {
            if is_pub(&f.vis) {
                let path = format!("{self_ty}::{}", f.sig.ident);
                let line = format!("fn {path}: {}{}", api_attrs(&f.attrs), tokens(&f.sig));
                push(out, path, line);
            }
        } else if let syn::ImplItem::Const(c) = ii {
            if is_pub(&c.vis) {
                let path = format!("{self_ty}::{}", c.ident);
                push(out, path.clone(), format!("const {path}: {}", tokens(&c.ty)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_minor_version_of_a_0_x_crate_is_a_breaking_bump() {
        assert!(is_breaking_bump("0.1.0", "0.2.0"));
        assert!(is_breaking_bump("1.4.2", "2.0.0"));
        assert!(!is_breaking_bump("0.1.0", "0.1.1"));
        assert!(!is_breaking_bump("1.4.2", "1.5.0"));
        assert!(!is_breaking_bump("0.2.0", "0.1.0"));
    }

    #[test]
    fn a_changed_signature_is_a_removed_line() {
        let dir = std::env::temp_dir().join(format!("belfry-apicheck-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("lib.rs");
        std::fs::write(&file, "pub struct S; impl S { pub fn f(&self, a: u32) {} fn hidden() {} }").unwrap();
        let before = listing(&dir).unwrap();
        assert!(before.iter().any(|l| l == "fn S::f: fn f (& self , a : u32)"), "{before:?}");
        assert!(!before.iter().any(|l| l.contains("hidden")));
        std::fs::write(&file, "pub struct S; impl S { pub fn f(&self, a: u64) {} }").unwrap();
        let after = listing(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(breaking(&before, &after), vec!["fn S::f: fn f (& self , a : u32)"]);
    }
}
