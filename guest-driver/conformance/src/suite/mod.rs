//! The tests, one file per rule family of RULES.md, named by the rule-id prefix it proves
//! (a test citing several families lives with its main one: most of its ids, else the first).
//! `isolation.rs` holds the process-isolation tests, which no family names, `hostile.rs`
//! the module against hostile processes (`forged.rs` against the words a process can write
//! for the device, `privilege.rs` what needs a
//! capability, `shares.rs` whose share an object counts against — processes by identity, not
//! number, and the per-user ceiling —, `stall.rs` teardown on a device that stopped answering, `unbind.rs` the waits of a device unbound through sysfs, `reset.rs` a PCI function reset of a bound device, `storm.rs` interrupt storms under
//! moderation, `faults.rs` each of the module's allocations failed in turn), `umd.rs` and `umd_wait.rs`
//! the library's behaviour as its users expect it (waits on several values,
//! deadlines, reset status), which no family names either, and `transport.rs` the
//! shared-doorbell transport, which then runs the doorbell families' default-device
//! tests again on a shared-doorbell device. Each file's `all()` lists its tests; [`all`] runs
//! the families in the order below.

use crate::Test;

mod cap;
mod ctx;
mod d3dkmt;
mod db;
mod eng;
mod faults;
mod fen;
mod forged;
mod hostile;
mod irq;
mod isolation;
mod log;
mod mv;
mod nf;
mod privilege;
mod pwr;
mod race;
mod reset;
mod ring;
mod shares;
mod shr;
mod split;
mod stall;
mod storm;
mod sub;
mod term;
mod transport;
mod umd;
mod umd_foreign;
mod umd_sync;
mod umd_wait;
mod unbind;
mod vic;
mod xad;

/// Every test, family by family.
pub(crate) fn all() -> Vec<Test> {
    let families: [fn() -> Vec<Test>; 33] = [
        db::all,
        vic::all,
        sub::all,
        ring::all,
        ctx::all,
        term::all,
        cap::all,
        isolation::all,
        fen::all,
        nf::all,
        mv::all,
        irq::all,
        log::all,
        shr::all,
        race::all,
        hostile::all,
        forged::all,
        umd::all,
        eng::all,
        xad::all,
        umd_wait::all,
        umd_sync::all,
        umd_foreign::all,
        d3dkmt::all,
        split::all,
        pwr::all,
        privilege::all,
        shares::all,
        stall::all,
        unbind::all,
        reset::all,
        storm::all,
        faults::all,
    ];
    let mut tests: Vec<Test> = families.iter().flat_map(|all| all()).collect();
    let again = transport::on_shared_doorbells(&tests);
    let bar0 = transport::on_bar0_mailbox(&tests);
    tests.extend(transport::all());
    tests.extend(again);
    tests.extend(bar0);
    tests
}

#[cfg(test)]
mod checks {
    use std::collections::{BTreeMap, BTreeSet};

    /// The `proves:` ids of each test function of the suite (collected by `build.rs`).
    fn documented() -> BTreeMap<String, BTreeSet<String>> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (id, place) in crate::coverage::guest_documented() {
            let name = place.rsplit(':').next().unwrap_or(place);
            out.entry(name.to_string()).or_default().insert((*id).to_string());
        }
        out
    }

    #[test]
    fn registry_ids_match_the_proves_lines_and_names_are_unique() {
        let docs = documented();
        let mut names = BTreeSet::new();
        for t in crate::registry() {
            assert!(names.insert(t.name), "duplicate test {}", t.name);
            let ids: BTreeSet<String> = t.ids.iter().map(|s| (*s).to_string()).collect();
            let documented = docs.get(t.name).cloned().unwrap_or_default();
            assert_eq!(documented, ids, "{}: registry ids differ from its proves line", t.name);
            for id in &ids {
                let (family, number) = id.split_once('-').unwrap();
                assert!(family.chars().all(|c| c.is_ascii_uppercase()) && number.parse::<u32>().is_ok(), "{id}");
            }
        }
    }

    #[test]
    fn each_test_lives_in_the_file_of_its_main_family() {
        let mut file_of: BTreeMap<String, String> = BTreeMap::new();
        for (_, place) in crate::coverage::guest_documented() {
            let (file, name) = place.rsplit_once(':').unwrap();
            file_of.insert(name.to_string(), file.rsplit('/').next().unwrap().trim_end_matches(".rs").to_string());
        }
        for t in crate::registry().into_iter().filter(|t| !t.ids.is_empty()) {
            let mut count: BTreeMap<&str, usize> = BTreeMap::new();
            for id in t.ids {
                *count.entry(id.split('-').next().unwrap()).or_default() += 1;
            }
            let most = count.values().copied().max().unwrap();
            let main = t.ids.iter().map(|id| id.split('-').next().unwrap()).find(|f| count[f] == most).unwrap();
            assert_eq!(file_of[t.name], main.to_ascii_lowercase(), "{} proves mostly {main}", t.name);
        }
    }

    #[test]
    fn filters_match_name_substrings_and_exact_rule_ids() {
        let all = super::all();
        let pick = |f: &str| all.iter().filter(|t| crate::selected(t, &[f.to_string()])).count();
        assert_eq!(pick("VIC-05"), 1);
        assert_eq!(pick("vic-0"), 0, "ids match exactly");
        assert!(pick("doorbell") > 1);
        let hostile = all.iter().filter(|t| t.file() == "hostile").count();
        assert!(hostile > 1 && pick("HOSTILE") == hostile, "a suite file selects its {hostile} tests");
        let transport = all.iter().filter(|t| t.name.ends_with("_on_shared_doorbells")).count();
        assert!(transport > 0 && pick("transport") > transport, "the reruns belong to transport.rs");
        assert_eq!(all.iter().filter(|t| crate::selected(t, &[])).count(), all.len());
    }
}
