//! Trace files written and read back in both forms, torn, growing and in several members.

use super::*;

fn lines(n: usize) -> String {
    (0..n).map(|i| format!("{{\"t_ns\":{i},\"event\":\"doorbell\",\"index\":1,\"value\":{i}}}\n")).collect()
}

fn read_all(path: &Path) -> String {
    let mut text = String::new();
    open(path).unwrap().read_to_string(&mut text).unwrap();
    text
}

#[test]
fn both_forms_read_back_the_lines_written() {
    let dir = tempfile::tempdir().unwrap();
    let text = lines(5000);
    for compression in [Compression::Gzip, Compression::None] {
        let path = dir.path().join(device_file_name(0, compression));
        let mut w = Writer::create(&path, compression).unwrap();
        w.write_all(text.as_bytes()).unwrap();
        w.finish().unwrap();
        assert_eq!(is_gzip(&path).unwrap(), compression == Compression::Gzip);
        assert_eq!(read_all(&path), text, "{compression}");
    }
    let gz = std::fs::metadata(dir.path().join("device0.trace.jsonl.gz")).unwrap().len();
    let plain = std::fs::metadata(dir.path().join("device0.trace.jsonl")).unwrap().len();
    assert!(gz * 10 < plain, "gzip {gz} bytes against {plain} plain");
}

#[test]
fn a_torn_gzip_file_reads_as_far_as_it_was_flushed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.gz");
    let mut w = Writer::create(&path, Compression::Gzip).unwrap();
    let text = lines(300);
    w.write_all(text.as_bytes()).unwrap();
    w.flush().unwrap();
    let flushed = std::fs::read(&path).unwrap();
    w.write_all(lines(10).as_bytes()).unwrap();
    w.finish().unwrap();
    // Everything up to the flush, whole: no trailer and no error.
    std::fs::write(&path, &flushed).unwrap();
    assert_eq!(read_all(&path), text);
    // Cut anywhere: a prefix of the lines, never an error.
    for cut in [11, 40, flushed.len() / 2, flushed.len() - 3] {
        std::fs::write(&path, &flushed[..cut]).unwrap();
        let got = read_all(&path);
        assert!(text.starts_with(&got), "cut at {cut}");
    }
}

#[test]
fn a_growing_gzip_file_is_followed_from_where_the_reader_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.gz");
    let mut w = Writer::create(&path, Compression::Gzip).unwrap();
    w.write_all(lines(3).as_bytes()).unwrap();
    w.flush().unwrap();
    let mut r = open(&path).unwrap();
    let mut got = String::new();
    r.read_to_string(&mut got).unwrap();
    assert_eq!(got, lines(3));
    let more = "{\"t_ns\":9,\"event\":\"reset\",\"source\":\"register\"}\n";
    w.write_all(more.as_bytes()).unwrap();
    w.flush().unwrap();
    let mut next = String::new();
    r.read_to_string(&mut next).unwrap();
    assert_eq!(next, more, "the reader went on after the end it had met");
    w.finish().unwrap();
}

#[test]
fn members_with_names_follow_one_another() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.gz");
    let mut bytes = Vec::new();
    for (name, text) in [("a", "first\n"), ("b", "second\n")] {
        let mut gz = flate2::GzBuilder::new()
            .filename(name)
            .comment("c")
            .extra(vec![1, 2, 3])
            .write(Vec::new(), flate2::Compression::best());
        gz.write_all(text.as_bytes()).unwrap();
        bytes.extend(gz.finish().unwrap());
    }
    std::fs::write(&path, bytes).unwrap();
    assert_eq!(read_all(&path), "first\nsecond\n");
}

#[test]
fn bytes_that_are_not_gzip_after_the_magic_are_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.gz");
    std::fs::write(&path, [0x1f, 0x8b, 9, 0, 0, 0, 0, 0, 0, 0, 1, 2]).unwrap();
    let err = open(&path).unwrap().read_to_string(&mut String::new()).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    assert_eq!(Compression::from_str("zstd").unwrap_err(), "unknown trace compression \"zstd\" (gzip or none)");
}
