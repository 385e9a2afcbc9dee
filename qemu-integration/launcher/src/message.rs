//! How the launcher speaks: the `belfry:` prefix of its lines, an error with its chain of
//! causes, a step's duration as the user reads it, and the error type of the steps before and
//! around a run (not a guest verdict).

use std::fmt::Write as _;
use std::time::Duration;

/// A failure of the launcher before or around the run (not a guest verdict).
pub type BoxError = Box<dyn std::error::Error>;

/// Prints `message` with the launcher's prefix.
pub fn say(message: impl std::fmt::Display) {
    eprintln!("belfry: {message}");
}

/// Formats an error with its chain of causes.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}

/// Formats a duration for a step line: tenths of seconds under a minute, else minutes and
/// seconds.
pub fn format_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 60.0 {
        format!("{secs:.1} s")
    } else {
        let whole = d.as_secs();
        format!("{} min {:02} s", whole / 60, whole % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(format_duration(Duration::from_millis(1234)), "1.2 s");
        assert_eq!(format_duration(Duration::from_secs(59)), "59.0 s");
        assert_eq!(format_duration(Duration::from_secs(717)), "11 min 57 s");
    }

    #[test]
    fn an_error_reads_with_its_causes() {
        let inner = std::io::Error::other("disk full");
        assert_eq!(error_chain(&Wrapped(inner)), "writing x: disk full");
    }

    /// An error whose source is another.
    #[derive(Debug)]
    struct Wrapped(std::io::Error);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("writing x")
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
}
