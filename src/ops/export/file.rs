//! The export file: a header line naming the tenant, one record a line, and an `end` line once
//! complete. Opening an existing file resumes it: a partly written last line (the process died
//! while writing it) is cut off, and the last whole record says where to go on.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use anyhow::{bail, Context};
use serde_json::{json, Value};

/// Version of the record layout, in the header.
pub const FORMAT: u32 = 1;

/// Where an export stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resume {
    /// Nothing written yet (a new file).
    Start,
    /// The last record written: its kind and key.
    After { kind: String, key: Vec<String> },
    /// The file ends with the `end` line.
    Complete,
}

/// An export file open for appending, and where it stands.
pub struct ExportFile {
    file: File,
    pub resume: Resume,
}

impl ExportFile {
    /// Opens (or creates) `path` for `tenant`; an existing file must be an export of the same
    /// tenant.
    pub fn open(path: &Path, tenant: &str) -> anyhow::Result<ExportFile> {
        // Only its owner reads a tenant's data, and a symbolic link planted at the path is
        // refused (the open fails with ELOOP) instead of writing wherever it points.
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .with_context(|| {
                format!(
                    "opening {} (an export is never written through a symbolic link)",
                    path.display()
                )
            })?;
        let metadata = file.metadata()?;
        if !metadata.is_file() {
            bail!("{} is not a regular file", path.display());
        }
        // A file made earlier with wider permissions is narrowed before anything is added.
        if metadata.permissions().mode() & 0o077 != 0 {
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        let whole = whole_lines_len(&mut file)?;
        if whole < file.metadata()?.len() {
            file.set_len(whole)?;
        }
        if whole == 0 {
            let mut export = ExportFile {
                file,
                resume: Resume::Start,
            };
            export.write(&json!({"kind": "export", "tenant": tenant, "format": FORMAT}))?;
            return Ok(export);
        }
        let header = first_line(&mut file)?;
        if header["kind"] != "export" || header["tenant"] != tenant {
            bail!(
                "{} is not an export of tenant {tenant:?} (its first line: {header}); choose another file",
                path.display()
            );
        }
        let last = last_line(&mut file, whole)?;
        let resume = match last["kind"].as_str() {
            Some("end") => Resume::Complete,
            Some("export") => Resume::Start,
            Some(kind) => Resume::After {
                kind: kind.to_string(),
                key: last["key"]
                    .as_array()
                    .map(|k| {
                        k.iter()
                            .filter_map(|v| v.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default(),
            },
            None => bail!("{}: unreadable last record {last}", path.display()),
        };
        Ok(ExportFile { file, resume })
    }

    /// Appends one record.
    pub fn write(&mut self, record: &Value) -> anyhow::Result<()> {
        let mut line = serde_json::to_vec(record)?;
        line.push(b'\n');
        self.file.write_all(&line)?;
        Ok(())
    }

    /// Makes what was written durable (after each batch, and at the end).
    pub fn sync(&mut self) -> anyhow::Result<()> {
        self.file.sync_data()?;
        Ok(())
    }
}

/// Length of the file up to and including its last newline.
fn whole_lines_len(file: &mut File) -> anyhow::Result<u64> {
    let len = file.metadata()?.len();
    line_start(file, len)
}

/// Where the line holding the byte before `end` starts: just after the last newline before
/// `end`, or 0.
fn line_start(file: &mut File, end: u64) -> anyhow::Result<u64> {
    let mut end = end;
    let mut chunk = vec![0u8; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let n = (end - start) as usize;
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut chunk[..n])?;
        if let Some(i) = chunk[..n].iter().rposition(|b| *b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

fn first_line(file: &mut File) -> anyhow::Result<Value> {
    file.seek(SeekFrom::Start(0))?;
    let mut line = String::new();
    BufReader::new(&mut *file).read_line(&mut line)?;
    Ok(serde_json::from_str(&line)?)
}

/// The last whole line of a file whose whole lines end at `whole`.
fn last_line(file: &mut File, whole: u64) -> anyhow::Result<Value> {
    let start = line_start(file, whole - 1)?;
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = vec![0u8; (whole - start) as usize];
    file.read_exact(&mut bytes)?;
    Ok(serde_json::from_slice(&bytes)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("q-a2a-export-{}-{name}", uuid::Uuid::new_v4()))
    }

    #[test]
    fn a_new_file_starts_and_a_torn_last_line_is_cut() {
        let path = temp("torn");
        let mut f = ExportFile::open(&path, "t-acme").unwrap();
        assert_eq!(f.resume, Resume::Start);
        f.write(&json!({"kind": "task", "key": ["a"]})).unwrap();
        f.write(&json!({"kind": "task", "key": ["b"]})).unwrap();
        drop(f);
        let mut raw = OpenOptions::new().append(true).open(&path).unwrap();
        raw.write_all(br#"{"kind": "task", "ke"#).unwrap();
        drop(raw);
        let f = ExportFile::open(&path, "t-acme").unwrap();
        assert_eq!(
            f.resume,
            Resume::After {
                kind: "task".into(),
                key: vec!["b".into()]
            }
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.ends_with("{\"key\":[\"b\"],\"kind\":\"task\"}\n"),
            "{text}"
        );
        assert!(ExportFile::open(&path, "t-globex").is_err());
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn an_ended_file_is_complete() {
        let path = temp("ended");
        let mut f = ExportFile::open(&path, "t-acme").unwrap();
        f.write(&json!({"kind": "end"})).unwrap();
        drop(f);
        assert_eq!(
            ExportFile::open(&path, "t-acme").unwrap().resume,
            Resume::Complete
        );
        std::fs::remove_file(&path).unwrap();
    }
}
