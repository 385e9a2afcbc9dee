//! A test's result as the runner keeps it and `results.json` lists it ([`Record`], its
//! [`Outcome`]), and as a test run in a process of its own hands it back (serialized).

use serde::{Deserialize, Serialize};

/// Outcome of one test.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Passed.
    Pass,
    /// Failed.
    Fail,
    /// Not run: no attached device offers the configuration, or the kernel lacks a feature the
    /// test needs (`registry::Skip`). A run with a SKIP fails (`runner::incomplete`).
    Skip,
}

/// One line of the results file.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    /// Test name.
    pub name: String,
    /// Outcome.
    pub outcome: Outcome,
    /// Rule ids the test proves.
    pub ids: Vec<String>,
    /// Why it failed or was skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A SKIP because the kernel lacks a feature (`registry::Skip`): another kernel's run must pass it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kernel_lacks: bool,
    /// Device it ran on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Seconds.
    pub seconds: f64,
    /// The iteration it ran in (1-based), when the selection was repeated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iteration: Option<u32>,
    /// Its position in the registry (0-based), by which the launcher puts the records of a run
    /// across several guests back in order.
    #[serde(default)]
    pub index: u32,
}
