//! One guest's share of a suite run across several guests (`--shard K/N`): the launcher boots
//! N guests, each with the same devices, and gives guest K the tests [`Shard::take`] deals it;
//! each guest's module, kernel and devices are its own, so the tests of different shards never
//! meet. The launcher merges the shards' results into one report in registry order.
//!
//! The deal keeps each guest's two phases about as long as the others': the exclusive tests,
//! which run alone, are dealt round-robin in registry order; the tests that hold only their
//! device ([`resources::declared`]) run side by side on different devices but one after
//! another on the same one, so each device configuration's tests are dealt round-robin on their
//! own (each configuration's deal starting one shard after the previous one's), and no guest
//! gets the whole chain of one device.

use crate::harness::registry::{Needs, Test};
use crate::harness::resources::{self, Resources};

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
    /// registry order.
    #[must_use]
    pub fn take(self, tests: Vec<Test>) -> (Vec<Test>, Vec<Test>) {
        // Each configuration's next position in its deal (its first starts at its own rank),
        // and the exclusive tests' next position.
        let mut configurations: Vec<(Needs, usize)> = Vec::new();
        let mut exclusive = 0usize;
        tests.into_iter().partition(|t| {
            let position = match resources::declared(t.name) {
                Resources::Exclusive => &mut exclusive,
                Resources::Device => {
                    let at = match configurations.iter().position(|(needs, _)| *needs == t.needs) {
                        Some(at) => at,
                        None => {
                            configurations.push((t.needs, configurations.len()));
                            configurations.len() - 1
                        }
                    };
                    &mut configurations[at].1
                }
            };
            let mine = *position % self.count == self.index;
            *position += 1;
            mine
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let (mine, others) = Shard { index, count: 3 }.take(all.clone());
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

    #[test]
    fn the_exclusive_tests_and_each_configurations_device_tests_are_dealt_evenly() {
        let all = crate::registry();
        let exclusive =
            |tests: &[Test]| tests.iter().filter(|t| resources::declared(t.name) == Resources::Exclusive).count();
        let on = |tests: &[Test], needs: Needs| {
            tests.iter().filter(|t| resources::declared(t.name) == Resources::Device && t.needs == needs).count()
        };
        let (a, b) =
            (Shard { index: 0, count: 2 }.take(all.clone()).0, Shard { index: 1, count: 2 }.take(all.clone()).0);
        assert!(exclusive(&a).abs_diff(exclusive(&b)) <= 1, "exclusive: {} vs {}", exclusive(&a), exclusive(&b));
        let mut configurations: Vec<Needs> = all.iter().map(|t| t.needs).collect();
        configurations.dedup();
        for needs in configurations {
            assert!(on(&a, needs).abs_diff(on(&b, needs)) <= 1, "{needs:?}: {} vs {}", on(&a, needs), on(&b, needs));
        }
    }

    #[test]
    fn one_shard_is_the_whole_selection() {
        let all = crate::registry();
        let (mine, others) = Shard::WHOLE.take(all.clone());
        assert_eq!(mine.len(), all.len());
        assert!(others.is_empty());
    }
}
