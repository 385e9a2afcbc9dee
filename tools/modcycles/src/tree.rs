//! A crate's module tree as rustc builds it: from the crate root, each `mod name;` found in its
//! file (`name.rs` or `name/mod.rs` in the module's directory, or the file a `#[path]` names),
//! inline `mod name { … }` blocks followed inside their file. Items under `#[cfg(test)]` are left
//! out: test modules may reach anywhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A module path inside its crate: `[]` is the root, `["fence", "wait"]` is `crate::fence::wait`.
pub type ModPath = Vec<String>;

/// One parsed file of the crate and the module it holds.
pub struct ModFile {
    /// The file on disk.
    pub path: PathBuf,
    /// The module the file holds.
    pub module: ModPath,
    /// Its parsed contents.
    pub syntax: syn::File,
}

/// The files of one crate and the module each module path lives in.
pub struct Crate {
    /// Every module file, the root first.
    pub files: Vec<ModFile>,
    /// For every module, inline ones included, the index in `files` of the file that holds it.
    pub modules: BTreeMap<ModPath, usize>,
}

/// Whether `attrs` hold `#[cfg(test)]`.
pub fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|ident| ident == "test"))
}

/// The value of a `#[path = "…"]` attribute.
fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find(|a| a.path().is_ident("path")).and_then(|a| match &a.meta {
        syn::Meta::NameValue(nv) => match &nv.value {
            syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

impl Crate {
    /// Reads the crate whose root file is `root`.
    pub fn load(root: &Path) -> Result<Crate, String> {
        let mut krate = Crate { files: Vec::new(), modules: BTreeMap::new() };
        let dir = root.parent().unwrap_or(Path::new(".")).to_path_buf();
        krate.add_file(root.to_path_buf(), Vec::new(), dir)?;
        Ok(krate)
    }

    /// Parses `path`, which holds `module` and whose child modules live in `child_dir`.
    fn add_file(&mut self, path: PathBuf, module: ModPath, child_dir: PathBuf) -> Result<(), String> {
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let syntax = syn::parse_file(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let path = path.canonicalize().unwrap_or(path);
        let index = self.files.len();
        self.modules.insert(module.clone(), index);
        let file_dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let items = syntax.items.clone();
        self.files.push(ModFile { path, module: module.clone(), syntax });
        self.add_items(index, &items, &module, &child_dir, &file_dir)
    }

    /// The child modules declared by `items`, which sit in `module` of file `index`.
    fn add_items(
        &mut self,
        index: usize,
        items: &[syn::Item],
        module: &ModPath,
        child_dir: &Path,
        file_dir: &Path,
    ) -> Result<(), String> {
        for item in items {
            let syn::Item::Mod(m) = item else { continue };
            if is_test_only(&m.attrs) {
                continue;
            }
            let name = m.ident.to_string();
            let mut child = module.clone();
            child.push(name.clone());
            match &m.content {
                Some((_, inner)) => {
                    self.modules.insert(child.clone(), index);
                    let dir = child_dir.join(&name);
                    self.add_items(index, inner, &child, &dir, &dir)?;
                }
                None => {
                    let (file, dir) = match path_attr(&m.attrs) {
                        Some(p) => {
                            let file = file_dir.join(p);
                            let dir = file.parent().unwrap_or(Path::new(".")).to_path_buf();
                            (file, dir)
                        }
                        None => {
                            let flat = child_dir.join(format!("{name}.rs"));
                            if flat.exists() {
                                (flat, child_dir.join(&name))
                            } else {
                                (child_dir.join(&name).join("mod.rs"), child_dir.join(&name))
                            }
                        }
                    };
                    self.add_file(file, child, dir)?;
                }
            }
        }
        Ok(())
    }

    /// The file holding the module `path` names: the longest prefix of `path` that is a module.
    pub fn file_of(&self, path: &[String]) -> Option<usize> {
        (0..=path.len()).rev().find_map(|n| self.modules.get(&path[..n]).copied())
    }
}
