//! Rule coverage: for every rule id of the repository's `docs/RULES.md`, read from it at build
//! time, whether a passing guest test proves it, a passing host test proves it (the device's and
//! the library's tests, whose `proves:` lines `build.rs` collects), only the device's side of it
//! is proven (a rule about the OS or the KMD whose host test cites `ID (device side)`), or why
//! it may stay unproven (`[future]`, `[optional]`, or a reason in `rules/unproven.txt` naming
//! the missing Linux mechanism). Anything else is a gap. Which tests passed is the caller's: the
//! suite's own run for the guest ([`report`], the host tests as cited), the runs' result files
//! for `belfry-rules` ([`report_from`]).

use std::collections::BTreeMap;

use serde::Serialize;

include!(concat!(env!("OUT_DIR"), "/proves.rs"));

/// The rule catalogue: each rule is a `- **ID** — text (source: …) [tag]…` line.
const RULES: &str = include_str!("../../../../docs/RULES.md");
/// `rules/unproven.txt`: `ID — reason` per line.
const UNPROVEN: &str = include_str!("../../rules/unproven.txt");

/// Where a rule stands.
#[derive(Clone, Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// A passing guest test proves it.
    Guest,
    /// Only host tests prove it.
    Host,
    /// A rule about the OS or the KMD whose only proof is a host test of the device's side.
    #[serde(rename = "device-side")]
    DeviceSide,
    /// Unproven, and allowed to be.
    Allowed,
    /// A guest test proves it, but that test was not selected (a `--filter` run): not a gap.
    #[serde(rename = "not-run")]
    NotRun,
    /// Unproven without a reason.
    Gap,
}

/// One rule id's line of the report.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// The rule id.
    pub id: String,
    /// Its RULES.md tags (`future`, `optional`, `ambiguous`).
    pub tags: Vec<String>,
    /// Where it stands.
    pub status: Status,
    /// Tests proving it (`file:test` for host tests, test names for guest tests).
    pub proven_by: Vec<String>,
    /// Why it may stay unproven.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Lines of a rules file without comments and blanks.
fn entries(text: &str) -> impl Iterator<Item = &str> {
    text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#'))
}

/// The rule ids of `docs/RULES.md` with their tags, in its order.
pub fn index() -> Vec<(&'static str, Vec<&'static str>)> {
    rules_of(RULES)
}

/// The rules of a catalogue: each `- **ID** — …` line whose id is `FAMILY-NN` (the notes, `N1`…,
/// are not rules) with the tags it carries (`[future]`, `[optional]`, `[ambiguous]`), in order.
fn rules_of(text: &str) -> Vec<(&str, Vec<&str>)> {
    text.lines()
        .filter_map(|line| {
            let (id, rest) = line.strip_prefix("- **")?.split_once("**")?;
            let valid = id.split_once('-').is_some_and(|(family, n)| {
                !family.is_empty()
                    && family.chars().all(|c| c.is_ascii_uppercase())
                    && !n.is_empty()
                    && n.chars().all(|c| c.is_ascii_digit())
            });
            if !valid {
                return None;
            }
            let tags = rest
                .split('[')
                .skip(1)
                .filter_map(|s| s.split_once(']').map(|(tag, _)| tag))
                .filter(|tag| matches!(*tag, "future" | "optional" | "ambiguous"))
                .collect();
            Some((id, tags))
        })
        .collect()
}

/// The allowed-unproven reasons of `rules/unproven.txt`.
pub fn unproven_reasons() -> BTreeMap<&'static str, &'static str> {
    entries(UNPROVEN).filter_map(|l| l.split_once(" — ")).map(|(id, why)| (id.trim(), why.trim())).collect()
}

/// The ids host tests prove, with their tests.
pub fn host_proves() -> &'static [(&'static str, &'static str)] {
    HOST_PROVES
}

/// The ids whose device side only host tests prove (`ID (device side)`), with their tests.
pub fn device_side_proves() -> &'static [(&'static str, &'static str)] {
    DEVICE_SIDE_PROVES
}

/// The `proves:` lines of the suite's own tests: `(id, "file:test")`.
pub fn guest_documented() -> &'static [(&'static str, &'static str)] {
    GUEST_PROVES
}

/// The report for a run whose passing guest tests prove `guest` (`(id, test name)` pairs), with
/// the host tests as cited (the suite cannot see their results); `not_run` holds `(id, test
/// name)` of the registered tests this run did not select.
pub fn report<'a>(
    guest: impl IntoIterator<Item = (&'a str, &'a str)>,
    not_run: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<Row> {
    report_from(guest, HOST_PROVES.iter().copied(), DEVICE_SIDE_PROVES.iter().copied(), not_run)
}

/// Groups `(id, test)` pairs by id.
fn by_id<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> BTreeMap<&'a str, Vec<String>> {
    let mut out: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (id, test) in pairs {
        out.entry(id).or_default().push(test.to_string());
    }
    out
}

/// The report from what passed: `guest`, `host` and `device_side` are `(id, test)` pairs of
/// passing tests (guest tests, host tests, host tests citing only the device's side); `not_run`
/// as for [`report`].
pub fn report_from<'a>(
    guest: impl IntoIterator<Item = (&'a str, &'a str)>,
    host: impl IntoIterator<Item = (&'a str, &'a str)>,
    device_side: impl IntoIterator<Item = (&'a str, &'a str)>,
    not_run: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<Row> {
    let (by_guest, by_host, by_device) = (by_id(guest), by_id(host), by_id(device_side));
    let by_unselected = by_id(not_run);
    let reasons = unproven_reasons();
    index()
        .into_iter()
        .map(|(id, tags)| {
            let tag_reason = tags.iter().find(|t| **t == "future" || **t == "optional").map(|t| format!("[{t}]"));
            let (status, proven_by, reason) = if let Some(tests) = by_guest.get(id) {
                (Status::Guest, tests.clone(), None)
            } else if let Some(tests) = by_host.get(id) {
                (Status::Host, tests.clone(), None)
            } else if let Some(tests) = by_device.get(id) {
                (Status::DeviceSide, tests.clone(), None)
            } else if let Some(why) = reasons.get(id) {
                (Status::Allowed, Vec::new(), Some((*why).to_string()))
            } else if let Some(why) = tag_reason {
                (Status::Allowed, Vec::new(), Some(why))
            } else if let Some(tests) = by_unselected.get(id) {
                (Status::NotRun, Vec::new(), Some(format!("proven by {}, not selected", tests.join(", "))))
            } else {
                (Status::Gap, Vec::new(), None)
            };
            Row { id: id.to_string(), tags: tags.iter().map(|t| (*t).to_string()).collect(), status, proven_by, reason }
        })
        .collect()
}

/// One paragraph summing `rows` up: what they were computed from (`basis`), the counts, then
/// the gaps by id. A filtered run says its coverage is partial and counts the ids only
/// unselected tests prove apart from the gaps.
pub fn summary(rows: &[Row], basis: &str) -> String {
    let count = |s: Status| rows.iter().filter(|r| r.status == s).count();
    let (guest, host, allowed) = (count(Status::Guest), count(Status::Host), count(Status::Allowed));
    let (device_side, not_run) = (count(Status::DeviceSide), count(Status::NotRun));
    let gaps: Vec<&str> = rows.iter().filter(|r| r.status == Status::Gap).map(|r| r.id.as_str()).collect();
    let partial = if not_run > 0 {
        format!("; partial: a filtered or sharded run, {not_run} more ids are proven by tests it did not select")
    } else {
        String::new()
    };
    let mut text = format!(
        "coverage ({basis}{partial}): {} of {} rule ids proven ({guest} in the guest, {host} by host tests only); \
         {device_side} device side only (rules about the OS or the KMD whose host test proves the device's part); \
         {allowed} allowed unproven; {} gaps",
        guest + host,
        rows.len(),
        gaps.len()
    );
    if !gaps.is_empty() {
        text.push_str(": ");
        text.push_str(&gaps.join(" "));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_and_reasons_are_well_formed() {
        let ids: Vec<&str> = index().iter().map(|(id, _)| *id).collect();
        assert!(ids.len() > 100, "index has {} ids", ids.len());
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ids.len(), "duplicate ids in docs/RULES.md");
        for (id, why) in unproven_reasons() {
            assert!(ids.contains(&id), "rules/unproven.txt names {id}, which is not in docs/RULES.md");
            assert!(why.len() > 20, "{id}: a reason must name the missing mechanism");
        }
        for (id, test) in HOST_PROVES.iter().chain(DEVICE_SIDE_PROVES).chain(GUEST_PROVES) {
            assert!(ids.contains(id), "{test} cites {id}, which is not in docs/RULES.md");
        }
    }

    #[test]
    fn rules_are_the_id_lines_with_their_tags_in_order() {
        let rules = "## A\n\n- **FEN-08** — text [x] (source) [ambiguous]\n- **N1** (FEN-08): note\n\
                     - **LOG-16** — t [optional] [ambiguous]\n- **LOG-17** — plain\n";
        assert_eq!(
            rules_of(rules),
            vec![("FEN-08", vec!["ambiguous"]), ("LOG-16", vec!["optional", "ambiguous"]), ("LOG-17", vec![])]
        );
    }

    #[test]
    fn a_rule_is_proven_by_the_guest_before_the_host_and_allowed_only_with_a_reason() {
        let (host_id, _) = HOST_PROVES[0];
        let rows = report([(host_id, "some_guest_test")], []);
        let row = rows.iter().find(|r| r.id == host_id).unwrap();
        assert_eq!((row.status.clone(), row.proven_by.clone()), (Status::Guest, vec!["some_guest_test".to_string()]));
        let rows = report([], []);
        assert_eq!(rows.iter().find(|r| r.id == host_id).unwrap().status, Status::Host);
        let future = index().into_iter().find(|(id, tags)| {
            tags.contains(&"future") && !HOST_PROVES.iter().chain(DEVICE_SIDE_PROVES).any(|(h, _)| h == id)
        });
        if let Some((id, _)) = future {
            let row = rows.iter().find(|r| r.id == id).unwrap();
            assert_eq!((row.status.clone(), row.reason.as_deref()), (Status::Allowed, Some("[future]")));
        }
        assert!(summary(&rows, "as cited").starts_with("coverage (as cited): "));
        if let Some((id, test)) = DEVICE_SIDE_PROVES.iter().find(|(d, _)| !HOST_PROVES.iter().any(|(h, _)| h == d)) {
            let row = rows.iter().find(|r| r.id == *id).unwrap();
            assert_eq!(row.status, Status::DeviceSide);
            assert!(row.proven_by.contains(&test.to_string()), "{row:?}");
            let ran = report_from([], [], [], []);
            assert_eq!(ran.iter().find(|r| r.id == *id).unwrap().status, Status::Gap, "its host test did not pass");
        }
    }

    #[test]
    fn a_filtered_run_reports_unselected_proofs_as_not_run_and_says_it_is_partial() {
        let (id, _) = *GUEST_PROVES
            .iter()
            .find(|(id, _)| {
                !HOST_PROVES.iter().chain(DEVICE_SIDE_PROVES).any(|(h, _)| h == id)
                    && !unproven_reasons().contains_key(id)
            })
            .expect("a rule only the guest proves");
        let full = report([], []);
        assert_eq!(full.iter().find(|r| r.id == id).unwrap().status, Status::Gap);
        let filtered = report([], [(id, "unselected_test")]);
        let row = filtered.iter().find(|r| r.id == id).unwrap();
        assert_eq!(row.status, Status::NotRun);
        let text = summary(&filtered, "this run");
        assert!(text.starts_with("coverage (this run; partial: a filtered or sharded run,"), "{text}");
        assert!(!text.split(" gaps").nth(1).unwrap_or_default().contains(id), "{text}");
    }
}
