//! The harness: everything that runs the suite but proves nothing itself.
//!
//! - [`registry`]: a test's entry ([`registry::Test`]: name, proven rule ids, the device
//!   configuration it [`registry::Needs`]) and the command line's filter;
//! - [`runner`]: device probing and selection from `QUERY_CAPS`, one line per test, the JSON
//!   results, one test at a time or several side by side;
//! - [`resources`]: what each test holds while it runs (its device only, or everything);
//! - [`schedule`]: which waiting test may start beside the running ones;
//! - [`shard`]: one guest's share of a run across several guests (`--shard K/N`);
//! - [`isolated`]: one test in a process of its own, its output kept to be printed whole;
//! - [`record`]: a test's result ([`record::Record`], [`record::Outcome`]);
//! - [`fail_inject`]: the kernel's fault injection on the tests' own tasks (`--fail-inject`), a
//!   test judged by whether the module's objects return to where they were;
//! - [`coverage`]: rule ids proven in the guest, by host tests, or allowed to stay unproven,
//!   and the gaps;
//! - [`proc`]: forked processes and a cross-process signal;
//! - [`tasks`]: where a process's threads wait in the kernel, and killing its process group;
//! - [`exec_probe`]: what a copy of the suite exec'd by a test does instead of running tests;
//! - [`channel`]: a socket pair passing messages and file descriptors between processes;
//! - [`raw`]: raw ioctls on a file of its own, for what the library refuses to do (foreign
//!   handles, forbidden submissions);
//! - [`mapping`]: a raw shared mapping probed through the kernel (zapped pages, its file
//!   offset).

pub mod channel;
pub mod coverage;
pub mod exec_probe;
pub mod fail_inject;
pub mod isolated;
pub mod mapping;
pub mod proc;
pub mod raw;
pub mod record;
pub mod registry;
pub mod resources;
pub mod runner;
pub mod schedule;
pub mod shard;
pub mod tasks;
