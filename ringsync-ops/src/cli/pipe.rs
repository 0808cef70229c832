//! The command's output, remembering whether its reader went away.

use std::io::{self, Write};

/// Writes through to the command's output and notes a broken pipe, so
/// `run` can tell "the reader has seen enough" (`| head -1`) from a failure.
pub(super) struct Output<'a> {
    inner: &'a mut (dyn Write + Send),
    closed: bool,
}

impl<'a> Output<'a> {
    pub(super) fn new(inner: &'a mut (dyn Write + Send)) -> Self {
        Output {
            inner,
            closed: false,
        }
    }

    /// Whether a write or flush found the reader gone.
    pub(super) fn closed(&self) -> bool {
        self.closed
    }

    fn note<T>(&mut self, r: io::Result<T>) -> io::Result<T> {
        if matches!(&r, Err(e) if e.kind() == io::ErrorKind::BrokenPipe) {
            self.closed = true;
        }
        r
    }
}

impl Write for Output<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let r = self.inner.write(buf);
        self.note(r)
    }

    fn flush(&mut self) -> io::Result<()> {
        let r = self.inner.flush();
        self.note(r)
    }
}
