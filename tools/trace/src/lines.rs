//! Reading the tool's input files a line at a time, with a bound on a line's length: a trace or
//! timeline file is untrusted input (a crafted or damaged file must give a clear message, not
//! exhaust memory), so no file is read whole and no line is buffered past [`MAX_LINE_BYTES`].
//! Lines that are not what the reader expects are counted and the first few kept, by line
//! number, for the message ([`Skipped`]).

use std::io::{self, BufRead};

/// The longest line read (bytes, newline excluded). The longest records a device writes (the
/// header with the device configuration, an argument block of the largest mailbox command in
/// hex) are a few KiB.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// How many skipped lines are kept with their reason (the rest are only counted).
pub const SKIPPED_KEPT: usize = 10;

/// One line read.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// Its text (invalid UTF-8 replaced), newline removed.
    Text(String),
    /// A line over [`MAX_LINE_BYTES`]: its length; its bytes were read past, not kept.
    TooLong(u64),
}

/// A line with its place in the file.
#[derive(Debug, PartialEq, Eq)]
pub struct Numbered {
    /// 1-based line number.
    pub number: u64,
    /// The line.
    pub line: Line,
    /// Whether it ended with a newline (the last line of a file still being written may not).
    pub terminated: bool,
    /// Bytes it took in the file, newline included.
    pub bytes: u64,
}

/// Lines of `R`, each bounded by [`MAX_LINE_BYTES`].
pub struct Lines<R> {
    inner: R,
    number: u64,
    buf: Vec<u8>,
}

impl<R: BufRead> Lines<R> {
    /// Lines of `inner`, numbered from `first_number`.
    pub fn new(inner: R, first_number: u64) -> Self {
        Lines { inner, number: first_number.saturating_sub(1), buf: Vec::new() }
    }

    /// The next line; `None` at the end.
    pub fn next_line(&mut self) -> io::Result<Option<Numbered>> {
        self.buf.clear();
        let limit = MAX_LINE_BYTES as u64 + 1;
        let read = io::Read::take(&mut self.inner, limit).read_until(b'\n', &mut self.buf)? as u64;
        if read == 0 {
            return Ok(None);
        }
        self.number = self.number.saturating_add(1);
        let mut terminated = self.buf.last() == Some(&b'\n');
        if terminated {
            self.buf.pop();
        }
        if self.buf.len() > MAX_LINE_BYTES {
            let (rest, found) = self.skip_line()?;
            terminated = found;
            let bytes = read.saturating_add(rest);
            let length = bytes.saturating_sub(u64::from(terminated));
            return Ok(Some(Numbered { number: self.number, line: Line::TooLong(length), terminated, bytes }));
        }
        let text = String::from_utf8_lossy(&self.buf).into_owned();
        Ok(Some(Numbered { number: self.number, line: Line::Text(text), terminated, bytes: read }))
    }

    /// Reads past the rest of a line without keeping it: the bytes read (newline included)
    /// and whether a newline ended it.
    fn skip_line(&mut self) -> io::Result<(u64, bool)> {
        let mut skipped: u64 = 0;
        loop {
            let available = match self.inner.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                return Ok((skipped, false));
            }
            match available.iter().position(|&b| b == b'\n') {
                Some(at) => {
                    self.inner.consume(at + 1);
                    return Ok((skipped.saturating_add(at as u64 + 1), true));
                }
                None => {
                    let n = available.len();
                    self.inner.consume(n);
                    skipped = skipped.saturating_add(n as u64);
                }
            }
        }
    }
}

/// Lines a reader did not take: how many, and the first [`SKIPPED_KEPT`] with their reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Lines skipped.
    pub count: u64,
    /// The first ones: line number and why.
    pub first: Vec<(u64, String)>,
}

impl Skipped {
    /// Notes line `number`, skipped for `reason`.
    pub fn note(&mut self, number: u64, reason: impl Into<String>) {
        self.count = self.count.saturating_add(1);
        if self.first.len() < SKIPPED_KEPT {
            self.first.push((number, reason.into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8]) -> Vec<Numbered> {
        let mut lines = Lines::new(input, 1);
        std::iter::from_fn(|| lines.next_line().unwrap()).collect()
    }

    #[test]
    fn lines_are_numbered_and_a_torn_last_line_is_marked() {
        let got = all(b"a\n\nbc");
        assert_eq!(got.len(), 3);
        assert_eq!(
            (got[0].number, &got[0].line, got[0].terminated, got[0].bytes),
            (1, &Line::Text("a".into()), true, 2)
        );
        assert_eq!(got[1].line, Line::Text(String::new()));
        assert_eq!(
            (got[2].number, &got[2].line, got[2].terminated, got[2].bytes),
            (3, &Line::Text("bc".into()), false, 2)
        );
    }

    #[test]
    fn an_over_long_line_is_read_past_not_kept() {
        let mut input = vec![b'x'; MAX_LINE_BYTES + 5];
        input.extend_from_slice(b"\nnext\n");
        let got = all(&input);
        assert_eq!(got[0].line, Line::TooLong(MAX_LINE_BYTES as u64 + 5));
        assert_eq!((got[0].terminated, got[0].bytes), (true, MAX_LINE_BYTES as u64 + 6));
        assert_eq!((got[1].number, &got[1].line), (2, &Line::Text("next".into())));
        let exact = vec![b'y'; MAX_LINE_BYTES];
        assert_eq!(all(&exact)[0].line, Line::Text("y".repeat(MAX_LINE_BYTES)), "the limit itself is a line");
    }
}
