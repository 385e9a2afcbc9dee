//! `conformance --filter NAME|RULE-ID|FAMILY|FILE`: which tests a filter selects and which
//! devices they need. The suite lists its tests with `belfry-conformance --list` (`name [ids]
//! (device flags) in FILE`, FILE the suite file that registers it); the launcher runs that listing on the host (the guest binary is a static Linux
//! binary), resolves each filter, passes the selected test names to the suite in the guest and
//! attaches only device 0 (default flags: the bring-up checks and the golden listing) and the
//! devices whose configuration a selected test needs.

use std::path::Path;
use std::process::Command;

/// One test of the suite's listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Its name.
    pub name: String,
    /// The rule ids it proves.
    pub ids: Vec<String>,
    /// The device flags of the configuration it needs (empty: default flags).
    pub needs: String,
    /// The suite file that registers it (`hostile` for `suite/hostile.rs`; empty if not listed).
    pub file: String,
}

/// Parses one line of `belfry-conformance --list`.
pub fn parse_line(line: &str) -> Option<Listed> {
    let (name, rest) = line.trim().split_once(" [")?;
    let (ids, rest) = rest.split_once("] (")?;
    let (needs, file) = match rest.rsplit_once(") in ") {
        Some((needs, file)) if !file.contains([' ', ')']) => (needs, file),
        _ => (rest.strip_suffix(')')?, ""),
    };
    let ids = ids.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
    let needs = if needs == belfry_suite_layout::DEFAULT_FLAGS { String::new() } else { needs.to_string() };
    Some(Listed { name: name.to_string(), ids, needs, file: file.to_string() })
}

/// Runs `suite --list FILTERS...` (no filters: every test) and parses it.
pub fn list(suite: &Path, filters: &[String]) -> Result<Vec<Listed>, String> {
    let output = Command::new(suite)
        .arg("--list")
        .arg("--")
        .args(filters)
        .output()
        .map_err(|e| format!("running {} --list: {e}", suite.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} --list failed ({}): {}",
            suite.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let tests: Vec<Listed> = String::from_utf8_lossy(&output.stdout).lines().filter_map(parse_line).collect();
    if tests.is_empty() {
        return Err(format!("{} --list listed no tests", suite.display()));
    }
    Ok(tests)
}

/// The rule family of an id (`FEN` of `FEN-12`).
fn family(id: &str) -> &str {
    id.rsplit_once('-').map_or(id, |(family, _)| family)
}

/// What one filter selects (case-insensitively): every test of the rule family it names (`FEN`,
/// every test proving a `FEN-*` id) and of the suite file it names (`split`: the family's tests
/// and the file's, which also holds tests that prove no id); else the tests of the rule id it
/// names (`FEN-03`), and every test whose name contains it.
fn selects(filter: &str, test: &Listed, families: &[&str]) -> bool {
    if test.file.eq_ignore_ascii_case(filter) || test.ids.iter().any(|id| id.eq_ignore_ascii_case(filter)) {
        return true;
    }
    if families.iter().any(|f| f.eq_ignore_ascii_case(filter)) {
        return test.ids.iter().any(|id| family(id).eq_ignore_ascii_case(filter));
    }
    test.name.to_ascii_lowercase().contains(&filter.to_ascii_lowercase())
}

/// The tests any of `filters` selects, in suite order; an error naming a filter that selects
/// nothing.
pub fn resolve<'a>(filters: &[String], tests: &'a [Listed]) -> Result<Vec<&'a Listed>, String> {
    let mut families: Vec<&str> = tests.iter().flat_map(|t| t.ids.iter().map(|id| family(id))).collect();
    families.sort_unstable();
    families.dedup();
    let mut files: Vec<&str> = tests.iter().map(|t| t.file.as_str()).filter(|f| !f.is_empty()).collect();
    files.sort_unstable();
    files.dedup();
    for f in filters {
        if !tests.iter().any(|t| selects(f, t, &families)) {
            return Err(format!(
                "--filter {f} selects no test (a test name or part of one, a rule id such as FEN-01, a rule family: {}, or a suite file: {})",
                families.join(" "),
                files.join(" ")
            ));
        }
    }
    Ok(tests.iter().filter(|t| filters.iter().any(|f| selects(f, t, &families))).collect())
}

/// The device layout for `selected`: device 0 with default flags, then one device per other
/// configuration they need (with its companion, `belfry_suite_layout::Needs::companion`), in
/// `layout` order (the suite's default layout); configurations
/// not in `layout` come last.
pub fn devices_for(selected: &[&Listed], layout: &[&str]) -> Vec<String> {
    let mut needed: Vec<&str> = selected.iter().map(|t| t.needs.as_str()).filter(|n| !n.is_empty()).collect();
    let companions: Vec<&str> = needed
        .iter()
        .filter_map(|n| belfry_suite_layout::Needs::of_flags(n).and_then(|n| n.companion()))
        .map(|c| c.flags())
        .collect();
    needed.extend(companions);
    needed.sort_by_key(|n| layout.iter().position(|l| l == n).unwrap_or(usize::MAX));
    needed.dedup();
    let mut flags = vec![String::new()];
    flags.extend(needed.into_iter().map(String::from));
    flags
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing() -> Vec<Listed> {
        [
            "doorbell_rings_wake_the_engine [DB-01, DB-02] (default flags) in db",
            "two_doorbells_are_shared [DB-07, VIC-01] (--doorbells 2) in vic",
            "fence_waits_sleep_until_the_interrupt [FEN-04] (--inject no-fence-interrupts)",
            "monitored_race_is_caught_up [RACE-06, MV-03] (--inject slow-monitored-updates --inject no-catch-up-record --inject spurious-fence-records)",
            "fence_values_are_monotonic [FEN-01] (default flags)",
            "a_kill_storm_leaves_the_survivors_working [] (default flags) in hostile",
            "freed_allocations_go_with_their_last_mapping [] (default flags) in hostile",
            "a_ring_of_a_queue_proving_no_id [] (default flags) in db",
        ]
        .iter()
        .map(|l| parse_line(l).unwrap())
        .collect()
    }

    #[test]
    fn listing_lines_are_parsed() {
        let l = parse_line("a_test [X-1, Y-2] (--doorbells 2)").unwrap();
        assert_eq!(
            l,
            Listed {
                name: "a_test".into(),
                ids: vec!["X-1".into(), "Y-2".into()],
                needs: "--doorbells 2".into(),
                file: String::new()
            }
        );
        let l = parse_line("b_test [] (--inject no-fence-interrupts) in hostile").unwrap();
        assert_eq!((l.needs.as_str(), l.file.as_str()), ("--inject no-fence-interrupts", "hostile"));
        assert_eq!(parse_line("c_test [] (default flags) in storm").unwrap().needs, "");
        assert_eq!(parse_line("no_ids [] (default flags)").unwrap().ids, Vec::<String>::new());
        assert_eq!(parse_line("no_ids [] (default flags)").unwrap().needs, "");
        assert_eq!(parse_line("device /dev/belfry0: 16 doorbells"), None);
    }

    #[test]
    fn filters_select_by_family_id_or_name() {
        let tests = listing();
        let names = |f: &[&str]| -> Vec<String> {
            let filters: Vec<String> = f.iter().map(|s| s.to_string()).collect();
            resolve(&filters, &tests).unwrap().iter().map(|t| t.name.clone()).collect()
        };
        assert_eq!(names(&["fen"]), vec!["fence_waits_sleep_until_the_interrupt", "fence_values_are_monotonic"]);
        assert_eq!(names(&["FEN-01"]), vec!["fence_values_are_monotonic"]);
        assert_eq!(
            names(&["race-06", "doorbell"]),
            vec!["doorbell_rings_wake_the_engine", "two_doorbells_are_shared", "monitored_race_is_caught_up"]
        );
        assert_eq!(names(&["monotonic"]), vec!["fence_values_are_monotonic"]);
        assert_eq!(
            names(&["Hostile"]),
            vec!["a_kill_storm_leaves_the_survivors_working", "freed_allocations_go_with_their_last_mapping"]
        );
        assert_eq!(
            names(&["db"]),
            vec!["doorbell_rings_wake_the_engine", "two_doorbells_are_shared", "a_ring_of_a_queue_proving_no_id"],
            "a family and the suite file of that name"
        );
        let err = resolve(&["nothing-like-this".to_string()], &tests).unwrap_err();
        assert!(
            err.contains("--filter nothing-like-this selects no test")
                && err.contains("DB FEN MV RACE VIC")
                && err.contains("suite file: db hostile vic"),
            "{err}"
        );
    }

    #[test]
    fn only_the_needed_devices_are_attached() {
        let tests = listing();
        let layout = [
            "--doorbells 2",
            "--doorbell-model global",
            "--inject slow-monitored-updates --inject no-catch-up-record --inject spurious-fence-records",
            "--inject no-fence-interrupts",
        ];
        let all: Vec<&Listed> = tests.iter().collect();
        assert_eq!(
            devices_for(&all, &layout),
            vec![String::new(), "--doorbells 2".into(), layout[2].into(), "--inject no-fence-interrupts".into()]
        );
        assert_eq!(devices_for(&[&tests[4]], &layout), vec![String::new()]);
        let peer = parse_line("waits_cross_by_peer_signals [XAD-15] (--peer-signals) in xad").unwrap();
        let suite = crate::suite::suite_device_flags();
        assert_eq!(
            devices_for(&[&peer], &suite),
            vec![String::new(), "--doorbell-transport shared --peer-signals".into(), "--peer-signals".into()],
            "a peer-signal test gets its companion"
        );
        assert_eq!(
            devices_for(&[&tests[2], &tests[2]], &layout),
            vec![String::new(), "--inject no-fence-interrupts".to_string()]
        );
    }
}
