//! What the reliability and security suites (storm, dependency faults, bad input, authorisation
//! matrix, secrets, fuzz) count, and the switch to their long variants.

use std::io::Write;
use std::sync::Mutex;

/// `Q_A2A_LONG_TESTS=1` selects the long variants (bigger storms, longer fuzz runs).
pub fn long_tests() -> bool {
    std::env::var("Q_A2A_LONG_TESTS").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// Tests of one suite report from several threads of this process at once.
static REPORT_FILES: Mutex<()> = Mutex::new(());

/// Prints a suite's counts and, when `Q_A2A_TEST_REPORT_DIR` is set, appends them to
/// `<dir>/<suite>.txt` (scripts/test prints those files at the end).
pub fn report(suite: &str, line: &str) {
    let line = format!("[{suite}] {line}\n");
    eprint!("{line}");
    if let Ok(dir) = std::env::var("Q_A2A_TEST_REPORT_DIR") {
        let _guard = REPORT_FILES.lock().unwrap_or_else(|e| e.into_inner());
        let _ = std::fs::create_dir_all(&dir);
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(std::path::Path::new(&dir).join(format!("{suite}.txt")))
        {
            // One write per line, so a line never interleaves with another process's either.
            let _ = f.write_all(line.as_bytes());
        }
    }
}
