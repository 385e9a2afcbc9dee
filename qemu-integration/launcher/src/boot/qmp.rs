//! QEMU's monitor (QMP) on its unix socket: the launcher's key presses that wake a sleeping
//! guest ([`crate::boot::wake`]) and the NMI with which a guest that ran out of time is asked
//! for its backtraces ([`crate::boot::supervise`]).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long one QMP exchange may take.
const QMP_TIMEOUT: Duration = Duration::from_secs(5);

/// Errors of a QMP exchange.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The socket failed.
    #[error("QMP socket {}: {source}", path.display())]
    Io {
        /// The socket.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// QEMU answered with an error or closed the connection.
    #[error("QMP {command}: {answer}")]
    Refused {
        /// The command.
        command: &'static str,
        /// QEMU's answer (or "connection closed").
        answer: String,
    },
}

/// A connection to QEMU's monitor.
pub struct Qmp {
    path: PathBuf,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Qmp {
    /// Connects, reads the greeting and leaves capabilities negotiation.
    ///
    /// # Errors
    ///
    /// The socket's, or QEMU refusing `qmp_capabilities`.
    pub fn connect(path: &Path) -> Result<Self, Error> {
        let io = |source| Error::Io { path: path.to_path_buf(), source };
        let writer = UnixStream::connect(path).map_err(io)?;
        writer.set_read_timeout(Some(QMP_TIMEOUT)).map_err(io)?;
        let reader = BufReader::new(writer.try_clone().map_err(io)?);
        let mut qmp = Self { path: path.to_path_buf(), reader, writer };
        qmp.read_line()?; // {"QMP": {...}}
        qmp.execute("qmp_capabilities", "{\"execute\":\"qmp_capabilities\"}")?;
        Ok(qmp)
    }

    fn read_line(&mut self) -> Result<String, Error> {
        let mut line = String::new();
        let n = self.reader.read_line(&mut line).map_err(|source| Error::Io { path: self.path.clone(), source })?;
        if n == 0 {
            return Err(Error::Refused { command: "read", answer: "connection closed".into() });
        }
        Ok(line)
    }

    /// Sends `json` and waits for its answer (events on the way are skipped).
    fn execute(&mut self, command: &'static str, json: &str) -> Result<(), Error> {
        self.writer
            .write_all(format!("{json}\n").as_bytes())
            .map_err(|source| Error::Io { path: self.path.clone(), source })?;
        loop {
            let line = self.read_line()?;
            let answer: serde_json::Value =
                serde_json::from_str(&line).map_err(|_| Error::Refused { command, answer: line.trim().to_string() })?;
            if answer.get("return").is_some() {
                return Ok(());
            }
            if answer.get("error").is_some() {
                return Err(Error::Refused { command, answer: line.trim().to_string() });
            }
        }
    }

    /// Presses and releases the shift key (an i8042 keyboard interrupt in the guest).
    ///
    /// # Errors
    ///
    /// As [`Self::connect`].
    pub fn press_key(&mut self) -> Result<(), Error> {
        self.execute("send-key", r#"{"execute":"send-key","arguments":{"keys":[{"type":"qcode","data":"shift"}]}}"#)
    }

    /// Injects an NMI into every vCPU (`inject-nmi`). With `unknown_nmi_panic` on the kernel's
    /// command line ([`crate::boot::qemu::kernel_append`]) the guest panics and prints each
    /// CPU's backtrace and its blocked tasks.
    ///
    /// # Errors
    ///
    /// As [`Self::connect`].
    pub fn inject_nmi(&mut self) -> Result<(), Error> {
        self.execute("inject-nmi", r#"{"execute":"inject-nmi"}"#)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// A fake QEMU monitor: the greeting, then one answer per command (an event first for
    /// `send-key`); records the commands.
    fn fake_qmp(path: &Path, answer: &'static str) -> std::thread::JoinHandle<Vec<String>> {
        let listener = UnixListener::bind(path).unwrap();
        std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut writer = stream.try_clone().unwrap();
            writer.write_all(b"{\"QMP\": {\"version\": {}, \"capabilities\": []}}\n").unwrap();
            let mut commands = Vec::new();
            for line in BufReader::new(stream).lines() {
                let line = line.unwrap();
                if line.contains("send-key") {
                    writer.write_all(b"{\"event\": \"X\", \"timestamp\": {}}\n").unwrap();
                    writer.write_all(format!("{answer}\n").as_bytes()).unwrap();
                } else {
                    writer.write_all(b"{\"return\": {}}\n").unwrap();
                }
                commands.push(line);
            }
            commands
        })
    }

    #[test]
    fn a_key_press_is_a_send_key_after_capabilities() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("qmp.sock");
        let server = fake_qmp(&path, "{\"return\": {}}");
        let mut qmp = Qmp::connect(&path).unwrap();
        qmp.press_key().unwrap();
        qmp.press_key().unwrap();
        drop(qmp);
        let commands = server.join().unwrap();
        assert_eq!(commands.len(), 3, "{commands:?}");
        assert!(commands[0].contains("qmp_capabilities"));
        assert!(commands[1].contains(r#""execute":"send-key""#) && commands[1].contains("shift"));
    }

    #[test]
    fn a_refused_press_is_an_error_with_qemus_answer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("qmp.sock");
        let server = fake_qmp(&path, "{\"error\": {\"class\": \"GenericError\", \"desc\": \"no\"}}");
        let mut qmp = Qmp::connect(&path).unwrap();
        let err = qmp.press_key().unwrap_err().to_string();
        assert!(err.starts_with("QMP send-key: ") && err.contains("GenericError"), "{err}");
        drop(qmp);
        server.join().unwrap();
    }

    #[test]
    fn an_nmi_is_an_inject_nmi_after_capabilities() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("qmp.sock");
        let server = fake_qmp(&path, "{\"return\": {}}");
        Qmp::connect(&path).unwrap().inject_nmi().unwrap();
        let commands = server.join().unwrap();
        assert_eq!(commands.len(), 2, "{commands:?}");
        assert!(commands[1].contains(r#""execute":"inject-nmi""#), "{commands:?}");
    }
}
