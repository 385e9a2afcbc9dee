//! One guest's share of a suite run across several guests (`--shard K/N`): the launcher boots
//! N guests, each with the same devices, and gives guest K the tests [`Shard::take`] deals it;
//! each guest's module, kernel and devices are its own, so the tests of different shards never
//! meet. The launcher merges the shards' results into one report in registry order.
//!
//! The deal keeps each guest's two phases about as long as the others', by each test's
//! expected time ([`expected_seconds`]: a whole run's times on the guest's kernel,
//! [`Durations`], compiled in; a test they do not name counts as their median) and the tests
//! each guest runs at once (the suite's `--jobs`). The tests that hold only their device
//! ([`resources::declared`]) run side by side on different devices but one after another on
//! the same one, so each device configuration's tests are dealt on their own, longest first,
//! each to the shard whose chain on that configuration is shortest; then the exclusive tests,
//! which run alone, longest first, each to the shard expected to end first. Ties go to the
//! lower shard, so every guest, dealing the same selection, makes the same deal.

use crate::harness::registry::{Needs, Test};
use crate::harness::resources::Resources;

/// Whose whole run's times the deal expects (`--durations`): each file holds each test's
/// seconds (`SECONDS NAME` a line, `#` comments).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durations {
    /// The distro kernel's (`durations.txt`).
    #[default]
    Distro,
    /// The debug kernel's (`durations-debug.txt`): its tests are 3 to 10 times slower than on
    /// the distro kernel, and not in the same proportions (the CPU-bound ones more).
    Debug,
}

impl Durations {
    /// Parses `distro` or `debug`.
    ///
    /// # Errors
    /// Anything else.
    pub fn parse(text: &str) -> Result<Durations, String> {
        match text {
            "distro" => Ok(Durations::Distro),
            "debug" => Ok(Durations::Debug),
            _ => Err(format!("{text:?}: expected distro or debug")),
        }
    }

    /// The file's text.
    #[must_use]
    pub fn text(self) -> &'static str {
        match self {
            Durations::Distro => include_str!("../../durations.txt"),
            Durations::Debug => include_str!("../../durations-debug.txt"),
        }
    }
}

/// `name`'s seconds in `durations`, if it is there.
fn listed_seconds(durations: Durations, name: &str) -> Option<f64> {
    durations
        .text()
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once(' '))
        .find(|(_, n)| n.trim() == name)
        .and_then(|(s, _)| s.trim().parse().ok())
}

/// The expected seconds of each of `tests`: `durations`'s, or their median for a test it does
/// not name (a new one).
#[must_use]
pub fn expected_seconds(tests: &[Test], durations: Durations) -> Vec<f64> {
    let listed: Vec<Option<f64>> = tests.iter().map(|t| listed_seconds(durations, t.name)).collect();
    let mut known: Vec<f64> = listed.iter().flatten().copied().collect();
    known.sort_by(f64::total_cmp);
    let median = known.get(known.len() / 2).copied().unwrap_or(1.0);
    listed.into_iter().map(|s| s.unwrap_or(median)).collect()
}

/// Shard `index` (0-based) of `count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// This shard, 0-based.
    pub index: usize,
    /// How many there are (at least 1).
    pub count: usize,
}

impl Shard {
    /// The whole selection: one shard.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Parses `K/N` (K 1-based, 1 ≤ K ≤ N).
    ///
    /// # Errors
    /// What is wrong with `text`.
    pub fn parse(text: &str) -> Result<Shard, String> {
        let (k, n) = text.split_once('/').ok_or_else(|| format!("{text:?} is not K/N"))?;
        let k: usize = k.trim().parse().map_err(|_| format!("{text:?}: K is not a number"))?;
        let n: usize = n.trim().parse().map_err(|_| format!("{text:?}: N is not a number"))?;
        if n == 0 || k == 0 || k > n {
            return Err(format!("{text:?}: K/N needs 1 ≤ K ≤ N"));
        }
        Ok(Shard { index: k - 1, count: n })
    }

    /// Splits `tests` (registry order) into this shard's and the other shards', each in
    /// registry order, expecting `durations`' times and `jobs` tests at once in each guest.
    #[must_use]
    pub fn take(self, tests: Vec<Test>, durations: Durations, jobs: usize) -> (Vec<Test>, Vec<Test>) {
        let shard_of = self.deal(&tests, &expected_seconds(&tests, durations), jobs);
        let mut shards = shard_of.iter();
        tests.into_iter().partition(|_| shards.next() == Some(&self.index))
    }

    /// The shard of each of `tests`, given their expected `seconds` and `jobs` at once.
    fn deal(self, tests: &[Test], seconds: &[f64], jobs: usize) -> Vec<usize> {
        let n = self.count;
        let mut shard_of = vec![0; tests.len()];
        // Longest first; equal ones in registry order.
        let by_length = |of: &[usize]| {
            let mut of = of.to_vec();
            of.sort_by(|&a, &b| seconds[b].total_cmp(&seconds[a]).then(a.cmp(&b)));
            of
        };
        let least = |load: &[f64]| (0..n).min_by(|&a, &b| load[a].total_cmp(&load[b]).then(a.cmp(&b))).unwrap_or(0);
        let (mut device_sum, mut longest_chain) = (vec![0.0; n], vec![0.0f64; n]);
        let mut configurations: Vec<Needs> = Vec::new();
        for t in tests.iter().filter(|t| t.resources == Resources::Device) {
            if !configurations.contains(&t.needs) {
                configurations.push(t.needs);
            }
        }
        for needs in configurations {
            let of: Vec<usize> = (0..tests.len())
                .filter(|&i| tests[i].resources == Resources::Device && tests[i].needs == needs)
                .collect();
            let mut chain = vec![0.0; n];
            for i in by_length(&of) {
                let k = least(&chain);
                shard_of[i] = k;
                chain[k] += seconds[i];
                device_sum[k] += seconds[i];
            }
            for k in 0..n {
                longest_chain[k] = longest_chain[k].max(chain[k]);
            }
        }
        // A shard's device-only phase takes at least its longest chain, at most its device-only
        // tests' sum over the tests side by side.
        let side_by_side = jobs.max(1) as f64;
        let mut load: Vec<f64> = (0..n).map(|k| longest_chain[k].max(device_sum[k] / side_by_side)).collect();
        let exclusive: Vec<usize> = (0..tests.len()).filter(|&i| tests[i].resources == Resources::Exclusive).collect();
        for i in by_length(&exclusive) {
            let k = least(&load);
            shard_of[i] = k;
            load[k] += seconds[i];
        }
        shard_of
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::runner::DEFAULT_JOBS;

    #[test]
    fn k_of_n_parses_and_nonsense_is_refused() {
        assert_eq!(Shard::parse("2/3"), Ok(Shard { index: 1, count: 3 }));
        assert_eq!(Shard::parse("1/1"), Ok(Shard::WHOLE));
        for bad in ["0/2", "3/2", "1/0", "1", "a/2", "1/b", ""] {
            assert!(Shard::parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn every_test_lands_in_exactly_one_shard_in_registry_order() {
        let all = crate::registry();
        let mut seen: Vec<&str> = Vec::new();
        for index in 0..3 {
            let (mine, others) = Shard { index, count: 3 }.take(all.clone(), Durations::Distro, DEFAULT_JOBS);
            assert_eq!(mine.len() + others.len(), all.len());
            let positions: Vec<usize> =
                mine.iter().map(|t| all.iter().position(|a| a.name == t.name).expect("registered")).collect();
            assert!(positions.windows(2).all(|w| w[0] < w[1]), "shard {index} out of registry order");
            seen.extend(mine.iter().map(|t| t.name));
        }
        seen.sort_unstable();
        let mut names: Vec<&str> = all.iter().map(|t| t.name).collect();
        names.sort_unstable();
        assert_eq!(seen, names, "each test in one shard, none lost or doubled");
    }

    /// The expected time of each shard of `count` with `jobs` tests at once: its device-only
    /// phase (its longest configuration chain, or its device-only sum over the tests side by
    /// side) and its exclusive tests'.
    fn expected_shard_times(count: usize, durations: Durations, jobs: usize) -> Vec<f64> {
        let all = crate::registry();
        let seconds = expected_seconds(&all, durations);
        let time = |index: usize| {
            let (mine, _) = Shard { index, count }.take(all.clone(), durations, jobs);
            let of = |t: &Test| seconds[all.iter().position(|a| a.name == t.name).expect("registered")];
            let mut chains: Vec<(Needs, f64)> = Vec::new();
            let (mut device, mut exclusive) = (0.0, 0.0);
            for t in &mine {
                if t.resources == Resources::Exclusive {
                    exclusive += of(t);
                    continue;
                }
                device += of(t);
                match chains.iter_mut().find(|(n, _)| *n == t.needs) {
                    Some((_, s)) => *s += of(t),
                    None => chains.push((t.needs, of(t))),
                }
            }
            chains.iter().map(|(_, s)| *s).fold(device / jobs as f64, f64::max) + exclusive
        };
        (0..count).map(time).collect()
    }

    #[test]
    fn the_shards_are_expected_to_take_about_as_long() {
        // Each kernel's durations with the jobs its runs across guests use (the launcher's
        // `Flavour::suite_jobs`), and the tolerance a tenth of a percent of the whole.
        for (durations, jobs) in [(Durations::Distro, DEFAULT_JOBS), (Durations::Debug, 1)] {
            let whole: f64 = expected_seconds(&crate::registry(), durations).iter().sum();
            for count in [2, 3] {
                let times = expected_shard_times(count, durations, jobs);
                let (min, max) = times.iter().fold((f64::MAX, 0.0f64), |(lo, hi), &t| (lo.min(t), hi.max(t)));
                assert!(max - min < (whole / 1000.0).max(2.0), "{durations:?}, {count} shards: {times:?}");
            }
        }
    }

    #[test]
    fn the_durations_name_registered_tests_and_a_new_test_counts_as_the_median() {
        let names: Vec<&str> = crate::registry().iter().map(|t| t.name).collect();
        for durations in [Durations::Distro, Durations::Debug] {
            for line in durations.text().lines().filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty()) {
                let (seconds, name) = line.split_once(' ').expect("SECONDS NAME");
                assert!(seconds.parse::<f64>().is_ok_and(|s| s >= 0.0), "{line}");
                assert!(names.contains(&name), "{durations:?} names {name}, which no test is");
            }
        }
        let mut unlisted = crate::registry()[0];
        unlisted.name = "a_test_durations_txt_does_not_name";
        let mut all = crate::registry();
        all.push(unlisted);
        let seconds = expected_seconds(&all, Durations::Distro);
        let mut sorted = seconds[..seconds.len() - 1].to_vec();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(seconds[seconds.len() - 1], sorted[sorted.len() / 2]);
    }

    #[test]
    fn one_shard_is_the_whole_selection() {
        let all = crate::registry();
        let (mine, others) = Shard::WHOLE.take(all.clone(), Durations::Distro, DEFAULT_JOBS);
        assert_eq!(mine.len(), all.len());
        assert!(others.is_empty());
    }
}
