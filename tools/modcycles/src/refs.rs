//! The module paths a file names: every path of its code and of its `use` items that starts
//! at `crate::`, `super::`, `self::` or a child module of the scope it is written in, made
//! absolute. Paths inside macro invocations are found by scanning their tokens. Items under
//! `#[cfg(test)]` are skipped.

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

use crate::tree::{is_test_only, Crate, ModPath};

/// The absolute module paths named in file `index` of `krate`.
pub fn named_paths(krate: &Crate, index: usize) -> Vec<ModPath> {
    let file = &krate.files[index];
    let mut v = Refs { krate, scope: file.module.clone(), out: Vec::new() };
    for item in &file.syntax.items {
        v.visit_item(item);
    }
    v.out
}

struct Refs<'a> {
    krate: &'a Crate,
    /// The module the code being visited is written in.
    scope: ModPath,
    out: Vec<ModPath>,
}

impl Refs<'_> {
    /// Records `segments` (as written) made absolute, if it starts at a module.
    fn record(&mut self, segments: &[String]) {
        let Some(first) = segments.first() else { return };
        let path = match first.as_str() {
            "crate" => segments[1..].to_vec(),
            "self" => self.scope.iter().chain(&segments[1..]).cloned().collect(),
            "super" => {
                let ups = segments.iter().take_while(|s| *s == "super").count();
                let keep = self.scope.len().saturating_sub(ups);
                self.scope[..keep].iter().chain(&segments[ups..]).cloned().collect()
            }
            _ => {
                let mut child = self.scope.clone();
                child.push(first.clone());
                if !self.krate.modules.contains_key(&child) {
                    return;
                }
                self.scope.iter().chain(segments).cloned().collect()
            }
        };
        self.out.push(path);
    }

    /// Records every path a `use` tree names, `prefix` being the segments above it.
    fn use_tree(&mut self, tree: &syn::UseTree, prefix: &mut Vec<String>) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(&p.tree, prefix);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut path = prefix.clone();
                if n.ident != "self" {
                    path.push(n.ident.to_string());
                }
                self.record(&path);
            }
            syn::UseTree::Rename(r) => {
                let mut path = prefix.clone();
                if r.ident != "self" {
                    path.push(r.ident.to_string());
                }
                self.record(&path);
            }
            syn::UseTree::Glob(_) => {
                let path = prefix.clone();
                self.record(&path);
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(t, prefix);
                }
            }
        }
    }

    /// Records the `crate::…`, `super::…` and `self::…` paths among a macro's tokens.
    fn tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < trees.len() {
            if let TokenTree::Group(g) = &trees[i] {
                self.tokens(g.stream());
                i += 1;
                continue;
            }
            let starts = matches!(&trees[i], TokenTree::Ident(id) if id == "crate" || id == "super" || id == "self");
            let after_colons = i >= 1 && matches!(&trees[i - 1], TokenTree::Punct(p) if p.as_char() == ':');
            if !starts || after_colons {
                i += 1;
                continue;
            }
            let mut segments = vec![trees[i].to_string()];
            let mut j = i + 1;
            while let (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)), Some(TokenTree::Ident(id))) =
                (trees.get(j), trees.get(j + 1), trees.get(j + 2))
            {
                if a.as_char() != ':' || b.as_char() != ':' {
                    break;
                }
                segments.push(id.to_string());
                j += 3;
            }
            if segments.len() > 1 {
                self.record(&segments);
            }
            i = j;
        }
    }
}

impl<'ast> Visit<'ast> for Refs<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Macro(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Union(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if is_test_only(attrs) {
            return;
        }
        match item {
            syn::Item::Use(u) => self.use_tree(&u.tree, &mut Vec::new()),
            syn::Item::Mod(m) => {
                // A file module is visited as its own file; an inline one here, in its scope.
                if let Some((_, items)) = &m.content {
                    self.scope.push(m.ident.to_string());
                    for item in items {
                        self.visit_item(item);
                    }
                    self.scope.pop();
                }
            }
            _ => syn::visit::visit_item(self, item),
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() && path.segments.len() > 1 {
            let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.record(&segments);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        self.tokens(mac.tokens.clone());
    }
}
