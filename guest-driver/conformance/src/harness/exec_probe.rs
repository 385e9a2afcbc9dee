//! What a copy of the suite started by `execve` does for a test instead of running tests: the
//! suite's binary given `--count-contexts DEVICE` creates contexts on a file of `DEVICE` until
//! one is refused and exits with how many it got, so a test can see what the process it
//! exec'd into is allowed after the exec (its process id, and its share, unchanged).

use std::path::Path;

use crate::harness::raw::RawDev;

/// The flag that asks for [`count_contexts`].
pub const COUNT_CONTEXTS: &str = "--count-contexts";

/// Most contexts [`count_contexts`] tries (above any process's share, below an exit status's
/// 255).
const TRIES: u8 = 200;

/// Creates contexts on a new file of `path` until one is refused: how many it got (at most
/// [`TRIES`]), or 255 if the file did not open.
#[must_use]
pub fn count_contexts(path: &Path) -> u8 {
    let Ok(raw) = RawDev::open(path) else { return u8::MAX };
    let mut taken = 0;
    while taken < TRIES && raw.create_context().is_ok() {
        taken += 1;
    }
    taken
}
