//! What a run's end means: the exit code and its reason ([`verdict`]), the lspci golden file
//! ([`golden`]) and the run's check against it ([`lspci`]), the suite's results as JUnit, KTAP
//! and coverage ([`results`]), one report from the guests of a run across several ([`merge`]), the VFIO selftests' KTAP and counts ([`selftests`]), the fence timeline ([`timeline`]), what a quiet run shows when
//! it fails ([`report`]), `summary.txt` ([`summary`]), the traces of a repeated run's
//! failing iterations ([`iterations`]) and `belfry-bench`'s figures with their host
//! ([`bench`]).

pub mod bench;
pub mod golden;
pub mod iterations;
pub mod lspci;
pub mod merge;
pub mod report;
pub mod results;
pub mod selftests;
pub mod summary;
pub mod timeline;
pub mod verdict;
