//! The golden vectors the unit tests pin the signed form to (`tests/python/card_vectors.json`)
//! are what the official SDK computes today.

use tokio::process::Command;

use crate::support::python::python;
use crate::support::repo_path;

#[tokio::test]
async fn the_stored_vectors_are_what_the_sdk_computes() {
    let output = Command::new(python())
        .arg(repo_path("tests/python/card_vectors.py"))
        .arg("--check")
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "tests/python/card_vectors.json is stale; regenerate it with --write and review: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("vectors match"));
}
