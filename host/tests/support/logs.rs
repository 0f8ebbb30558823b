//! The controller's log, captured: the tests that run it in their own process read what it
//! told the operator (`logs()` once before the controller starts, then `captured()`).

use std::{
    io::Write,
    sync::{Arc, Mutex, OnceLock},
};

/// Installs the capturing subscriber (once per test binary); returns its buffer.
pub fn logs() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = buffer.clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter("info,nad_service_controller=debug,kube_runtime=debug")
            .with_ansi(false)
            .with_writer(move || Tee(writer.clone()))
            .try_init();
        buffer
    })
}

/// Writes to the capture buffer.
struct Tee(Arc<Mutex<Vec<u8>>>);

impl Write for Tee {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Everything logged so far.
pub fn captured() -> String {
    String::from_utf8_lossy(&logs().lock().unwrap()).into_owned()
}
