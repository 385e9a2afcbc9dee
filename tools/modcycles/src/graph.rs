//! The import graph of a crate's files and its cycles. A file that names a path inside another
//! file's module imports it, except when that module is one of its own ancestors: a module's
//! children are its implementation, and what the module (or the crate root) defines is their
//! shared vocabulary, so a child naming `super::Type` or `crate::Type` is no cycle with the
//! parent that declares it.

use petgraph::algo::tarjan_scc;
use petgraph::graph::DiGraph;

use crate::refs::named_paths;
use crate::tree::Crate;

/// Each cycle as the indices in `krate.files` of its files, sorted; cycles in a stable order.
pub fn cycles(krate: &Crate) -> Vec<Vec<usize>> {
    let mut g = DiGraph::<usize, ()>::new();
    let nodes: Vec<_> = (0..krate.files.len()).map(|i| g.add_node(i)).collect();
    for (from, node) in nodes.iter().enumerate() {
        for path in named_paths(krate, from) {
            if let Some(to) = krate.file_of(&path) {
                let ancestor = krate.files[from].module.starts_with(&krate.files[to].module);
                if to != from && !ancestor && !g.contains_edge(*node, nodes[to]) {
                    g.add_edge(*node, nodes[to], ());
                }
            }
        }
    }
    let mut out: Vec<Vec<usize>> = tarjan_scc(&g)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| {
            let mut files: Vec<usize> = c.into_iter().map(|n| g[n]).collect();
            files.sort_unstable();
            files
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::cycles;
    use crate::tree::Crate;

    /// The cycles of a crate made of `files` (`(path, text)`, the root `lib.rs` first), as the
    /// file names of each cycle.
    fn cycles_of(files: &[(&str, &str)]) -> Vec<Vec<String>> {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let krate = Crate::load(&dir.path().join(files[0].0)).unwrap();
        let base = dir.path().canonicalize().unwrap();
        let name = |i: usize| krate.files[i].path.strip_prefix(&base).unwrap().display().to_string();
        let sorted = |c: Vec<usize>| {
            let mut names: Vec<String> = c.into_iter().map(name).collect();
            names.sort();
            names
        };
        cycles(&krate).into_iter().map(sorted).collect()
    }

    #[test]
    fn two_siblings_that_import_each_other_are_a_cycle() {
        let found = cycles_of(&[
            ("lib.rs", "mod a;\nmod b;\n"),
            ("a.rs", "use crate::b::B;\npub struct A;\n"),
            ("b.rs", "pub struct B;\nfn f() -> crate::a::A { crate::a::A }\n"),
        ]);
        assert_eq!(found, vec![vec!["a.rs".to_string(), "b.rs".to_string()]]);
    }

    #[test]
    fn a_path_inside_a_macro_counts() {
        let found = cycles_of(&[
            ("lib.rs", "mod a;\nmod b;\n"),
            ("a.rs", "pub fn a() { println!(\"{}\", crate::b::B); }\n"),
            ("b.rs", "pub const B: u8 = 1;\nuse super::a::a;\n"),
        ]);
        assert_eq!(found.len(), 1, "{found:?}");
    }

    #[test]
    fn a_child_may_use_its_parent_and_test_code_may_use_anything() {
        let found = cycles_of(&[
            ("lib.rs", "mod a;\nmod b;\npub struct Root;\n"),
            ("a.rs", "mod inner;\npub struct A;\npub use inner::f;\nfn g() { self::inner::f(); }\n"),
            ("a/inner.rs", "use super::A;\npub fn f() -> A { let _ = crate::Root; A }\n"),
            ("b.rs", "use crate::a::A;\n#[cfg(test)]\nmod tests { use crate::b; }\n"),
        ]);
        assert!(found.is_empty(), "{found:?}");
        let found = cycles_of(&[
            ("lib.rs", "mod a;\nmod b;\n"),
            ("a.rs", "use crate::b::B;\n#[cfg(test)]\nmod tests { }\n"),
            ("b.rs", "pub struct B;\n#[cfg(test)]\nmod tests { use crate::a; }\n#[cfg(test)]\nuse crate::a::X;\n"),
        ]);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn modules_are_found_through_mod_rs_and_path_attributes() {
        let found = cycles_of(&[
            ("src/lib.rs", "mod a;\n#[path = \"../elsewhere/b.rs\"]\nmod b;\n"),
            ("src/a/mod.rs", "mod c;\n"),
            ("src/a/c.rs", "pub fn c() { crate::b::b() }\n"),
            ("elsewhere/b.rs", "pub fn b() { crate::a::c::c() }\n"),
        ]);
        assert_eq!(found, vec![vec!["elsewhere/b.rs".to_string(), "src/a/c.rs".to_string()]]);
    }
}
